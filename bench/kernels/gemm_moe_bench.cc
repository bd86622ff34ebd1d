// Kernel lab for the CUDA backend's GEMM, MoE, norm/elementwise and sampling kernels (style.md §7.4), at
// Kimi-Linear-48B shapes (and MXFP4 experts at Kimi K3's latent MoE shape). Each kernel is first checked
// against the CPU backend on the same inputs (for large shapes on a prefix of the rows, computed from the
// full-size CUDA run), then timed with CUDA events (3 warm-ups, median of --reps), rotating input sets so
// that each timed run reads more than the L2 cache holds.
// Every row prints bytes moved, FLOPs and the fraction of the ceilings measured in the same run
// (device-to-device copy and a large cuBLASLt bf16 GEMM). GEMMs run twice: heuristic algorithm and
// autotuned (GemmRunner::set_autotune). Exit code 1 when a check fails; 0 with a note when there is no GPU.
//
//   kernel_lab [--quick] [--reps N] [--only gemm|moe|norm|sample]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/workspace_planner.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemm/gemm_runner.h"
#include "bench/driver/bench_report.h"
#include "bench/driver/model_bench.h"
#include "core/dtype.h"

using namespace rill;

namespace {

constexpr int64_t kH = 2304, kE = 256, kTopK = 8, kI = 1024, kVocab = 163840;
constexpr double kRotateBytes = 160e6;  // > 2x the H200's 50 MB L2 per timed run
constexpr double kTol = 1e-2;

#define LAB_CHECK(expr)                                                        \
  do {                                                                         \
    const Status st_ = (expr);                                                 \
    if (!st_.ok()) {                                                           \
      std::fprintf(stderr, "%s failed: %s\n", #expr, st_.to_string().c_str()); \
      std::exit(2);                                                            \
    }                                                                          \
  } while (0)

template <typename T>
T unwrap(Result<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, r.status().to_string().c_str());
    std::exit(2);
  }
  return std::move(r).value();
}

struct Options {
  bool quick = false;
  int reps = 20;
  std::string only;
};

// Tensors of one backend, kept alive together.
struct Pool {
  backend::Backend& be;
  std::vector<backend::DeviceAllocation> keep;
  uint64_t seed = 101;

  TensorView empty(DType t, Shape s) {
    auto a = unwrap(be.allocate(std::max<size_t>(size_t(s.numel()) * dtype_size(t), 1)), "allocate");
    keep.push_back(a);
    return TensorView::make(a.data(), t, s, be.device());
  }
  TensorView random(DType t, Shape s, float lo, float hi) {
    TensorView v = empty(t, s);
    LAB_CHECK(be.fill_random(v, seed++, lo, hi));
    return v;
  }
  // A copy of device tensor `src` (contiguous) on this backend: activations widened to F32 for the CPU
  // reference, anything else byte for byte.
  TensorView mirror(backend::Backend& from, const TensorView& src, bool widen) {
    std::vector<char> bytes(src.nbytes());
    LAB_CHECK(from.synchronize());
    LAB_CHECK(from.copy_to_host(bytes.data(), src.data, bytes.size()));
    if (!widen || src.dtype == DType::F32) {
      TensorView v = empty(src.dtype, src.shape);
      LAB_CHECK(be.copy_to_device(v.data, bytes.data(), bytes.size()));
      return v;
    }
    TensorView v = empty(DType::F32, src.shape);
    std::vector<float> f(size_t(src.numel()));
    for (size_t i = 0; i < f.size(); ++i) f[i] = load_as_f32(bytes.data(), src.dtype, i);
    LAB_CHECK(be.copy_to_device(v.data, f.data(), f.size() * 4));
    return v;
  }
  // Sized by planning `op` on a planner for the backend (the same call the real run makes).
  Arena* scratch(const std::function<Status(backend::Backend&, Arena*)>& op) {
    Arena measure(nullptr, 0, be.device());
    backend::WorkspacePlanner planner(be);
    LAB_CHECK(op(planner, &measure));
    TensorView mem = empty(DType::U8, {int64_t(measure.high_water() + 256)});
    arenas.push_back(std::make_unique<Arena>(mem.data, size_t(mem.numel()), be.device()));
    return arenas.back().get();
  }
  std::vector<std::unique_ptr<Arena>> arenas;
};

std::vector<float> fetch(backend::Backend& be, const TensorView& t) {
  std::vector<char> bytes(t.nbytes());
  LAB_CHECK(be.synchronize());
  LAB_CHECK(be.copy_to_host(bytes.data(), t.data, bytes.size()));
  std::vector<float> out(size_t(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_f32(bytes.data(), t.dtype, i);
  return out;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return a.size() == b.size() ? std::sqrt(num / std::max(den, 1e-30)) : INFINITY;
}

// Contiguous leading rows of a 2-D view.
TensorView head_rows(const TensorView& t, int64_t n) {
  return t.rows(0, std::min(n, t.size(0)));
}

int n_sets_for(double bytes_per_run) {
  return int(std::clamp(std::ceil(kRotateBytes / bytes_per_run), 1.0, 8.0));
}

double time_median(backend::Backend& be, int reps, const std::function<Status(int)>& body) {
  for (int i = 0; i < 3; ++i) LAB_CHECK(body(i));
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) ms.push_back(unwrap(be.time_ms([&] { return body(3 + i); }), "time_ms"));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Lab {
  backend::Backend& dev;
  backend::Backend& tuned;  // a second CUDA backend whose GEMM runner autotunes
  backend::Backend& cpu;
  Options opt;
  std::vector<bench::BenchRow> rows;
  int failures = 0;

  void check(const std::string& what, double err, double tol) {
    const bool ok = err <= tol;
    std::printf("check %-52s rel-L2 %.2e (tol %.0e): %s\n", what.c_str(), err, tol, ok ? "ok" : "FAILED");
    if (!ok) ++failures;
  }
  void check_count(const std::string& what, int64_t bad, int64_t total, int64_t allowed) {
    const bool ok = bad <= allowed;
    std::printf("check %-52s %lld of %lld differ (allowed %lld): %s\n", what.c_str(), (long long)bad,
                (long long)total, (long long)allowed, ok ? "ok" : "FAILED");
    if (!ok) ++failures;
  }

  // ---------------------------------------------------------------------------------------------------- GEMM
  void gemm() {
    struct W {
      const char* name;
      int64_t N, K;
      DType out;
    };
    const W weights[] = {{"qkv", 12288, kH, DType::BF16},
                         {"o_proj", kH, 4096, DType::BF16},
                         {"lm_head", kVocab, kH, DType::F32}};
    std::vector<int64_t> ms = {1, 32, 256, 8192};
    if (opt.quick) ms = {1, 256};
    for (const W& w : weights) {
      Pool pool{dev};
      const double w_bytes = double(w.N * w.K) * 2;
      const int w_sets = n_sets_for(w_bytes);
      std::vector<backend::LinearWeight> lw;
      for (int s = 0; s < w_sets; ++s)
        lw.push_back({pool.random(DType::BF16, {w.N, w.K}, -std::sqrt(3.0f / float(w.K)),
                                  std::sqrt(3.0f / float(w.K)))});
      Pool cpool{cpu};
      backend::LinearWeight cw{cpool.mirror(dev, lw[0].weight, false)};
      for (int64_t M : ms) {
        const double x_bytes = double(M * w.K) * 2, y_bytes = double(M * w.N) * double(dtype_size(w.out));
        const int x_sets = n_sets_for(x_bytes + y_bytes);
        std::vector<TensorView> xs, ys;
        for (int s = 0; s < x_sets; ++s) {
          xs.push_back(pool.random(DType::BF16, {M, w.K}, -1, 1));
          ys.push_back(pool.empty(w.out, {M, w.N}));
        }
        // Check: rows [0, 8) of the full-size run against the CPU.
        LAB_CHECK(dev.gemm({xs[0], &lw[0], ys[0]}));
        const int64_t mc = std::min<int64_t>(M, 8);
        TensorView cx = cpool.mirror(dev, head_rows(xs[0], mc), true),
                   cy = cpool.empty(DType::F32, {mc, w.N});
        LAB_CHECK(cpu.gemm({cx, &cw, cy}));
        check(fmt::format("gemm {} M={} (rows 0..{})", w.name, M, mc - 1),
              rel_l2(fetch(dev, head_rows(ys[0], mc)), fetch(cpu, cy)), kTol);
        const double bytes = w_bytes + x_bytes + y_bytes, flops = 2.0 * double(M) * double(w.N) * double(w.K);
        for (int pass = 0; pass < 2; ++pass) {
          backend::Backend& be = pass == 0 ? dev : tuned;
          LAB_CHECK(dev.synchronize());
          const double t = time_median(be, opt.reps, [&](int i) {
            return be.gemm({xs[size_t(i % x_sets)], &lw[size_t(i % w_sets)], ys[size_t(i % x_sets)]});
          });
          rows.push_back({"gemm", fmt::format("{} [{}x{}] M={}", w.name, w.N, w.K, M), t, bytes, flops,
                          pass == 0 ? "cuBLASLt heuristic" : "cuBLASLt autotuned"});
        }
      }
    }
  }

  // ----------------------------------------------------------------------------------------------------- MoE
  void moe() {
    Pool pool{dev};
    Pool cpool{cpu};
    const float agu = std::sqrt(3.0f / float(kH)), adn = std::sqrt(3.0f / float(kI));
    backend::ExpertWeights ex;
    ex.gate_up = pool.random(DType::BF16, {kE, 2 * kI, kH}, -agu, agu);
    ex.down = pool.random(DType::BF16, {kE, kH, kI}, -adn, adn);
    const TensorView router = pool.random(DType::BF16, {kE, kH}, -0.05f, 0.05f);
    TensorView bias = pool.empty(DType::F32, {kE});
    {  // a ladder of biases, shuffled deterministically: selections vary but seldom tie
      std::vector<float> b(static_cast<size_t>(kE));
      for (int64_t e = 0; e < kE; ++e) b[size_t((e * 97) % kE)] = 0.03f * float(e);
      LAB_CHECK(dev.copy_to_device(bias.data, b.data(), b.size() * 4));
    }
    // CPU mirrors of the weights for the checks (3.6 GB of host memory).
    backend::ExpertWeights cex;
    cex.gate_up = cpool.mirror(dev, ex.gate_up, false);
    cex.down = cpool.mirror(dev, ex.down, false);
    const TensorView crouter = cpool.mirror(dev, router, false), cbias = cpool.mirror(dev, bias, false);

    std::vector<int64_t> ts = {1, 8, 32, 256, 8192};
    if (opt.quick) ts = {1, 256};
    for (int64_t T : ts) {
      const int x_sets = n_sets_for(double(T * kH) * 4);
      std::vector<TensorView> xs, ids, wts, outs;
      for (int s = 0; s < x_sets; ++s) {
        xs.push_back(pool.random(DType::BF16, {T, kH}, -2, 2));
        ids.push_back(pool.empty(DType::I32, {T, kTopK}));
        wts.push_back(pool.empty(DType::F32, {T, kTopK}));
        outs.push_back(pool.empty(DType::BF16, {T, kH}));
      }
      auto route_args = [&](int s) {
        return backend::MoeRouteArgs{xs[size_t(s)], router, bias,           int(kTopK),    1, 1, true,
                                     false,         2.446f, ids[size_t(s)], wts[size_t(s)]};
      };
      backend::MoeExpertsArgs ea{xs[0], ids[0], wts[0],  &ex,    backend::Activation::Silu,
                                 0,     0,      outs[0], nullptr};
      Arena* scratch = pool.scratch([&](backend::Backend& on, Arena* a) {
        auto b = ea;
        b.scratch = a;
        return on.moe_experts(b);
      });
      auto experts_args = [&](int s) {
        return backend::MoeExpertsArgs{
            xs[size_t(s)],   ids[size_t(s)], wts[size_t(s)], &ex, backend::Activation::Silu, 0, 0,
            outs[size_t(s)], scratch};
      };

      // Checks on the first tokens: routing ids, then the experts fed with the CUDA routing.
      LAB_CHECK(dev.moe_route(route_args(0)));
      LAB_CHECK(dev.moe_experts(experts_args(0)));
      const int64_t tc = std::min<int64_t>(T, 16);
      TensorView cx = cpool.mirror(dev, head_rows(xs[0], tc), true);
      TensorView cids = cpool.empty(DType::I32, {tc, kTopK}), cw = cpool.empty(DType::F32, {tc, kTopK});
      LAB_CHECK(cpu.moe_route({cx, crouter, cbias, int(kTopK), 1, 1, true, false, 2.446f, cids, cw}));
      const std::vector<float> gi = fetch(dev, head_rows(ids[0], tc)), ci = fetch(cpu, cids);
      int64_t bad = 0;
      for (size_t i = 0; i < gi.size(); ++i) bad += gi[i] != ci[i];
      check_count(fmt::format("moe_route T={} (tokens 0..{}) ids", T, tc - 1), bad, int64_t(gi.size()), 2);
      TensorView gids = cpool.mirror(dev, head_rows(ids[0], tc), false),
                 gw = cpool.mirror(dev, head_rows(wts[0], tc), false);
      TensorView cy = cpool.empty(DType::F32, {tc, kH});
      LAB_CHECK(cpu.moe_experts({cx, gids, gw, &cex, backend::Activation::Silu, 0, 0, cy, nullptr}));
      check(fmt::format("moe_experts T={} (tokens 0..{})", T, tc - 1),
            rel_l2(fetch(dev, head_rows(outs[0], tc)), fetch(cpu, cy)), kTol);

      const double unique = double(kE) * (1.0 - std::pow(1.0 - double(kTopK) / double(kE), double(T)));
      const double route_bytes = double(T * kH) * 2 + double(kE * kH) * 2 + double(T * kTopK) * 8;
      const double ex_bytes = unique * 3.0 * double(kH * kI) * 2 + double(T * kH) * 4 + double(T * kTopK) * 8;
      const double ex_flops = double(T * kTopK) * 6.0 * double(kH) * double(kI);
      const char* path = T * kTopK <= 64 ? "gathered GEMV" : "grouped mma.sync";
      double t = time_median(dev, opt.reps, [&](int i) { return dev.moe_route(route_args(i % x_sets)); });
      rows.push_back({"moe", fmt::format("route T={} E={} top-{}", T, kE, kTopK), t, route_bytes,
                      2.0 * double(T * kE * kH), "fp32 logits, cluster of 8"});
      t = time_median(dev, opt.reps, [&](int i) { return dev.moe_experts(experts_args(i % x_sets)); });
      rows.push_back({"moe", fmt::format("experts T={} I={}", T, kI), t, ex_bytes, ex_flops, path});
      t = time_median(dev, opt.reps, [&](int i) -> Status {
        RILL_TRY(dev.moe_route(route_args(i % x_sets)));
        return dev.moe_experts(experts_args(i % x_sets));
      });
      rows.push_back(
          {"moe", fmt::format("route+experts T={}", T), t, route_bytes + ex_bytes, ex_flops, path});
    }
  }

  // MXFP4 experts at K3's latent MoE shape (width 3584, I = 3072; 896 experts and top-16 there, 32 experts
  // and top-8 here: enough to time the kernels): the packed codes and E8M0 scales are read in place. Routing
  // is a fixed pattern (every expert gets T * 8 / 32 slots), so the row times the expert kernels alone.
  void moe_mxfp4() {
    constexpr int64_t E = 32, k = 8, Hx = 3584, I = 3072;
    Pool pool{dev};
    Pool cpool{cpu};
    backend::ExpertWeights ex;
    ex.format = backend::WeightFormat::Mxfp4;
    ex.gate_up = pool.random(DType::U8, {E, 2 * I, Hx / 2}, 0, 255);            // any codes, both signs
    ex.gate_up_scales = pool.random(DType::U8, {E, 2 * I, Hx / 32}, 114, 121);  // 2^-13 .. 2^-6
    ex.down = pool.random(DType::U8, {E, Hx, I / 2}, 0, 255);
    ex.down_scales = pool.random(DType::U8, {E, Hx, I / 32}, 114, 121);
    backend::ExpertWeights cex = ex;
    cex.gate_up = cpool.mirror(dev, ex.gate_up, false);
    cex.gate_up_scales = cpool.mirror(dev, ex.gate_up_scales, false);
    cex.down = cpool.mirror(dev, ex.down, false);
    cex.down_scales = cpool.mirror(dev, ex.down_scales, false);
    const double w_bytes = double(E) * double(3 * I * Hx) * (0.5 + 1.0 / 32);

    std::vector<int64_t> ts = {1, 4, 16, 256, 2048};
    if (opt.quick) ts = {1, 256, 2048};
    for (int64_t T : ts) {
      const TensorView x = pool.random(DType::BF16, {T, Hx}, -2, 2), out = pool.empty(DType::BF16, {T, Hx});
      const TensorView ids = pool.empty(DType::I32, {T, k}), wts = pool.empty(DType::F32, {T, k});
      {  // k distinct experts per token (5 is odd, so j * 5 runs through distinct residues mod 32)
        std::vector<int32_t> i(size_t(T * k));
        std::vector<float> w(size_t(T * k), 1.0f / float(k));
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = 0; j < k; ++j) i[size_t(t * k + j)] = int32_t((t * 11 + t / 3 + j * 5) % E);
        LAB_CHECK(dev.copy_to_device(ids.data, i.data(), i.size() * 4));
        LAB_CHECK(dev.copy_to_device(wts.data, w.data(), w.size() * 4));
      }
      backend::MoeExpertsArgs ea{x, ids, wts, &ex, backend::Activation::Situ, 4.0f, 25.0f, out, nullptr};
      ea.scratch = pool.scratch([&](backend::Backend& on, Arena* a) {
        auto b = ea;
        b.scratch = a;
        return on.moe_experts(b);
      });
      LAB_CHECK(dev.moe_experts(ea));
      const int64_t tc = std::min<int64_t>(T, 8);
      TensorView cx = cpool.mirror(dev, head_rows(x, tc), true),
                 cids = cpool.mirror(dev, head_rows(ids, tc), false),
                 cw = cpool.mirror(dev, head_rows(wts, tc), false), cy = cpool.empty(DType::F32, {tc, Hx});
      LAB_CHECK(cpu.moe_experts({cx, cids, cw, &cex, backend::Activation::Situ, 4.0f, 25.0f, cy, nullptr}));
      check(fmt::format("moe_experts mxfp4 T={} (tokens 0..{})", T, tc - 1),
            rel_l2(fetch(dev, head_rows(out, tc)), fetch(cpu, cy)), kTol);
      const double used = std::min(1.0, double(T * k) / double(E));  // fraction of experts with tokens
      const double bytes = used * w_bytes + double(T * Hx) * 4 + double(T * k) * 8;
      const double flops = double(T * k) * 6.0 * double(Hx) * double(I);
      const char* path = T * k <= 64 ? "MXFP4 gathered GEMV" : "MXFP4 grouped mma.sync, smem dequant";
      const double t = time_median(dev, opt.reps, [&](int) { return dev.moe_experts(ea); });
      rows.push_back({"moe", fmt::format("experts mxfp4 T={} E={} top-{} [{}x{}]", T, E, k, Hx, I), t, bytes,
                      flops, path});
    }
  }

  // ------------------------------------------------------------------------------------ norms / elementwise
  void norms() {
    const int64_t T = opt.quick ? 1024 : 8192, P = 32 * 128, I = 9216;
    Pool pool{dev};
    Pool cpool{cpu};
    const int sets = n_sets_for(double(T * kH) * 8);
    std::vector<TensorView> xs, ds, ys;
    for (int s = 0; s < sets; ++s) {
      xs.push_back(pool.random(DType::BF16, {T, kH}, -2, 2));
      ds.push_back(pool.random(DType::BF16, {T, kH}, -1, 1));
      ys.push_back(pool.empty(DType::BF16, {T, kH}));
    }
    const TensorView w = pool.random(DType::F32, {kH}, 0.5f, 1.5f), cw = cpool.mirror(dev, w, false);
    {  // rms_norm
      TensorView cx = cpool.mirror(dev, xs[0], true), cy = cpool.empty(DType::F32, {T, kH});
      LAB_CHECK(dev.rms_norm({xs[0], w, 1e-5f, ys[0]}));
      LAB_CHECK(cpu.rms_norm({cx, cw, 1e-5f, cy}));
      check(fmt::format("rms_norm [{}x{}]", T, kH), rel_l2(fetch(dev, ys[0]), fetch(cpu, cy)), kTol);
      const double t = time_median(dev, opt.reps, [&](int i) {
        return dev.rms_norm({xs[size_t(i % sets)], w, 1e-5f, ys[size_t(i % sets)]});
      });
      rows.push_back(
          {"norm", fmt::format("rms_norm [{}x{}]", T, kH), t, double(T * kH) * 4, 4.0 * double(T * kH), ""});
    }
    {  // add_rms_norm (updates its residual: checked once on fresh copies, then timed)
      TensorView cr = cpool.mirror(dev, xs[0], true), cd = cpool.mirror(dev, ds[0], true),
                 cy = cpool.empty(DType::F32, {T, kH});
      LAB_CHECK(dev.add_rms_norm({xs[0], ds[0], w, 1e-5f, ys[0]}));
      LAB_CHECK(cpu.add_rms_norm({cr, cd, cw, 1e-5f, cy}));
      check(fmt::format("add_rms_norm [{}x{}]", T, kH), rel_l2(fetch(dev, ys[0]), fetch(cpu, cy)), kTol);
      const double t = time_median(dev, opt.reps, [&](int i) {
        return dev.add_rms_norm({xs[size_t(i % sets)], ds[size_t(i % sets)], w, 1e-5f, ys[size_t(i % sets)]});
      });
      rows.push_back({"norm", fmt::format("add_rms_norm [{}x{}]", T, kH), t, double(T * kH) * 8,
                      5.0 * double(T * kH), ""});
    }
    {  // kda_output (gated RMSNorm over 32 heads of 128)
      const TensorView o = pool.random(DType::BF16, {T, 32, 128}, -1, 1),
                       g = pool.random(DType::BF16, {T, P}, -3, 3);
      const TensorView wo = pool.random(DType::F32, {128}, 0.5f, 1.5f), y = pool.empty(DType::BF16, {T, P});
      TensorView co = cpool.mirror(dev, o, true), cg = cpool.mirror(dev, g, true),
                 cwo = cpool.mirror(dev, wo, false);
      TensorView cy = cpool.empty(DType::F32, {T, P});
      LAB_CHECK(dev.kda_output({o, g, wo, 1e-5f, y}));
      LAB_CHECK(cpu.kda_output({co, cg, cwo, 1e-5f, cy}));
      check(fmt::format("kda_output [{}x32x128]", T), rel_l2(fetch(dev, y), fetch(cpu, cy)), kTol);
      const double t = time_median(dev, opt.reps, [&](int) { return dev.kda_output({o, g, wo, 1e-5f, y}); });
      rows.push_back(
          {"norm", fmt::format("kda_output [{}x32x128]", T), t, double(T * P) * 6, 8.0 * double(T * P), ""});
    }
    {  // glu (dense MLP width 9216: halves of [T, 2I])
      const int64_t M = opt.quick ? 256 : 2048;
      const TensorView gu = pool.random(DType::BF16, {M, 2 * I}, -3, 3), y = pool.empty(DType::BF16, {M, I});
      TensorView cgu = cpool.mirror(dev, gu, true), cy = cpool.empty(DType::F32, {M, I});
      LAB_CHECK(dev.glu({gu.narrow(1, 0, I), gu.narrow(1, I, I), y, backend::Activation::Silu, 0, 0}));
      LAB_CHECK(cpu.glu({cgu.narrow(1, 0, I), cgu.narrow(1, I, I), cy, backend::Activation::Silu, 0, 0}));
      check(fmt::format("glu silu [{}x{}]", M, I), rel_l2(fetch(dev, y), fetch(cpu, cy)), kTol);
      const double t = time_median(dev, opt.reps, [&](int) {
        return dev.glu({gu.narrow(1, 0, I), gu.narrow(1, I, I), y, backend::Activation::Silu, 0, 0});
      });
      rows.push_back(
          {"elem", fmt::format("glu silu [{}x{}]", M, I), t, double(M * I) * 6, 5.0 * double(M * I), ""});
    }
  }

  // ------------------------------------------------------------------------------------------------ sampling
  void sample() {
    struct Cfg {
      const char* name;
      backend::SamplingRow row;
    };
    const Cfg cfgs[] = {{"greedy", {0.0f, 1.0f, 0.0f, 0, 1, 0}},
                        {"T=0.7 top_p=0.9", {0.7f, 0.9f, 0.0f, 0, 2, 0}},
                        {"T=1 top_k=50", {1.0f, 1.0f, 0.0f, 50, 3, 0}},
                        {"T=1 (full vocabulary)", {1.0f, 1.0f, 0.0f, 0, 4, 0}}};
    std::vector<int64_t> rs = {1, 64, 256};
    if (opt.quick) rs = {1, 64};
    for (int64_t R : rs) {
      Pool pool{dev};
      Pool cpool{cpu};
      // LM-like logits: a uniform [-4, 4) floor plus a few dominant tokens per row (most of the mass in the
      // top handful, a long tail that top_p = 1 still has to reach sometimes).
      const TensorView logits = pool.random(DType::F32, {R, kVocab}, -4, 4);
      {
        std::vector<float> l = fetch(dev, logits);
        for (int64_t r = 0; r < R; ++r)
          for (int k = 0; k < 4; ++k)
            l[size_t(r * kVocab + (r * 7919 + k * 104729) % kVocab)] += 20.0f - 2.5f * float(k);
        LAB_CHECK(dev.copy_to_device(logits.data, l.data(), l.size() * 4));
      }
      const TensorView clogits = cpool.mirror(dev, logits, false);
      for (const Cfg& c : cfgs) {
        std::vector<backend::SamplingRow> rows_host(size_t(R), c.row);
        for (int64_t r = 0; r < R; ++r) rows_host[size_t(r)].counter = uint64_t(r);
        TensorView rows_dev =
            pool.empty(DType::U8, {int64_t(rows_host.size() * sizeof(backend::SamplingRow))});
        LAB_CHECK(dev.copy_to_device(rows_dev.data, rows_host.data(),
                                     rows_host.size() * sizeof(backend::SamplingRow)));
        const TensorView out = pool.empty(DType::I32, {R}), cout = cpool.empty(DType::I32, {R});
        backend::SampleArgs a{logits, static_cast<const backend::SamplingRow*>(rows_dev.data), out, nullptr};
        a.scratch = pool.scratch([&](backend::Backend& on, Arena* s) {
          auto b = a;
          b.scratch = s;
          return on.sample(b);
        });
        LAB_CHECK(dev.sample(a));
        LAB_CHECK(cpu.sample({clogits, rows_host.data(), cout, nullptr}));
        const std::vector<float> g = fetch(dev, out), cc = fetch(cpu, cout);
        int64_t bad = 0;
        for (size_t i = 0; i < g.size(); ++i) bad += g[i] != cc[i];
        check_count(fmt::format("sample {} R={}", c.name, R), bad, R, 0);
        const double t = time_median(dev, opt.reps, [&](int) { return dev.sample(a); });
        rows.push_back(
            {"sample", fmt::format("{} R={} V={}", c.name, R, kVocab), t, double(R * kVocab) * 4, 0, ""});
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick")
      opt.quick = true;
    else if (a == "--reps" && i + 1 < argc)
      opt.reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--only" && i + 1 < argc)
      opt.only = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--quick] [--reps N] [--only gemm|moe|norm|sample]\n", argv[0]);
      return 2;
    }
  }
  auto dev = backend::make_backend("cuda");
  if (!dev.ok()) {
    std::printf("kernel_lab: no CUDA device (%s); nothing to measure\n", dev.status().message().c_str());
    return 0;
  }
  auto tuned = unwrap(backend::make_backend("cuda"), "second CUDA backend");
  auto* tuned_cuda = dynamic_cast<cuda::CudaBackend*>(tuned.get());
  if (tuned_cuda && tuned_cuda->context().gemm) tuned_cuda->context().gemm->set_autotune(true);
  auto cpu = backend::make_cpu_backend();
  const bench::Ceilings ceil = unwrap(bench::measure_ceilings(**dev), "measure ceilings");
  std::printf("ceilings: device-to-device copy %.0f GB/s, cuBLASLt bf16 GEMM 8192^3 %.0f TFLOP/s\n",
              ceil.copy_gbps, ceil.gemm_tflops);
  Lab lab{**dev, *tuned, *cpu, opt, {}, 0};
  if (opt.only.empty() || opt.only == "gemm") lab.gemm();
  if (opt.only.empty() || opt.only == "moe") {
    lab.moe();
    lab.moe_mxfp4();
  }
  if (opt.only.empty() || opt.only == "norm") lab.norms();
  if (opt.only.empty() || opt.only == "sample") lab.sample();
  std::printf("\n%s", bench::format_table(lab.rows, ceil).c_str());
  std::printf("%s\n", lab.failures ? "SOME CHECKS FAILED" : "all checks passed");
  return lab.failures ? 1 : 0;
}
