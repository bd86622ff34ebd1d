// KDA kernel lab (style.md §7.4): checks the CUDA kda_prepare + kda_attention against the CPU backend on a
// small ragged batch, then times them at Kimi-Linear shapes (H = 32, d = 128) with CUDA events (warm-up,
// median of 25): chunked prefill B=1 T=8192 and B=8 T=2048 (gentle and steep gates: the steep one forces the
// direct fp32 diagonal blocks), the decode step at B = 1, 32, 256, and prepare. Each row prints bytes moved,
// FLOPs, the fraction of the device-to-device copy bandwidth measured in the same run, and fla's time on the
// same H200 (spec/performance-anchors.md §7). Exit code 1 when the check fails; 0 and a note without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/workspace_planner.h"
#include "core/dtype.h"
#include "model/step_batch.h"

using namespace rill;

namespace {

constexpr int kD = 128, kK = 4;

#define BENCH_CHECK(expr)                                                          \
  do {                                                                             \
    const Status st_ = (expr);                                                     \
    if (!st_.ok()) {                                                               \
      std::fprintf(stderr, "%s: %s\n", #expr, std::string(st_.message()).c_str()); \
      std::exit(2);                                                                \
    }                                                                              \
  } while (0)

template <typename T>
T unwrap(Result<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, std::string(r.status().message()).c_str());
    std::exit(2);
  }
  return std::move(r).value();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device tensors of one backend, kept alive together.
struct Pool {
  backend::Backend& be;
  std::vector<backend::DeviceAllocation> keep;
  TensorView put(const std::vector<float>& host, DType t, Shape s) {
    auto a = unwrap(be.allocate(size_t(s.numel()) * dtype_size(t)), "allocate");
    std::vector<char> bytes(a.size());
    for (size_t i = 0; i < host.size(); ++i) {
      if (t == DType::F32)
        reinterpret_cast<float*>(bytes.data())[i] = host[i];
      else
        reinterpret_cast<uint16_t*>(bytes.data())[i] = f32_to_bf16(host[i]);
    }
    BENCH_CHECK(be.copy_to_device(a.data(), bytes.data(), bytes.size()));
    keep.push_back(a);
    return TensorView::make(a.data(), t, s, be.device());
  }
  TensorView random(DType t, Shape s, float lo, float hi) {
    auto a = unwrap(be.allocate(size_t(s.numel()) * dtype_size(t)), "allocate");
    const TensorView v = TensorView::make(a.data(), t, s, be.device());
    BENCH_CHECK(be.fill_random(v, seed++, lo, hi));
    keep.push_back(a);
    return v;
  }
  // Sized by planning `op` on a planner for the backend (the same call the real run makes).
  Arena* scratch(const std::function<Status(backend::Backend&, Arena*)>& op) {
    Arena measure;
    backend::WorkspacePlanner planner(be);
    BENCH_CHECK(op(planner, &measure));
    auto a = unwrap(be.allocate(std::max<size_t>(measure.high_water(), 256)), "allocate scratch");
    keep.push_back(a);
    arenas.push_back(std::make_unique<Arena>(a.data(), a.size(), be.device()));
    return arenas.back().get();
  }
  uint64_t seed = 11;
  std::vector<std::unique_ptr<Arena>> arenas;
};

struct Layout {
  backend::BatchLayoutHost host;
  backend::BatchLayout dev;
};

void make_layout(backend::Backend& be, const std::vector<std::pair<int, int>>& seqs, Layout& l) {
  model::StepBatch b;
  int slot = 0;
  for (auto [start, n] : seqs) {
    model::SequenceStep s;
    s.start_pos = start;
    s.n_new = n;
    s.state_slot = slot++;
    s.block_table.assign(size_t((start + n + 63) / 64), 0);
    b.seqs.push_back(s);
    b.token_ids.resize(b.token_ids.size() + size_t(n), 0);
  }
  BENCH_CHECK(b.to_layout(64, &l.host));
  BENCH_CHECK(be.upload_layout(l.host, 64, &l.dev));
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

std::vector<float> fetch(backend::Backend& be, const TensorView& t) {
  std::vector<char> bytes(t.nbytes());
  BENCH_CHECK(be.synchronize());
  BENCH_CHECK(be.copy_to_host(bytes.data(), t.data, bytes.size()));
  std::vector<float> out(size_t(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_f32(bytes.data(), t.dtype, i);
  return out;
}

// Prepare + attention on both backends over a ragged batch (two prefills, two decode rows, state carried in);
// true when outputs and final states agree within the op tests' bf16 tolerance.
bool validate(backend::Backend& cuda) {
  std::unique_ptr<backend::Backend> cpu = backend::make_cpu_backend();
  const int H = 4, P = H * kD;
  const std::vector<std::pair<int, int>> seqs = {{0, 200}, {37, 1}, {90, 70}, {0, 1}};
  const int T = 272, S = int(seqs.size());
  std::mt19937 rng(5);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  auto randn = [&](int64_t n, float sc, bool round) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = round ? round_to_bf16(sc * n01(rng)) : sc * n01(rng);
    return v;
  };
  const auto qkv = randn(int64_t(T) * 3 * P, 1, true), graw = randn(int64_t(T) * P, 1, true),
             braw = randn(int64_t(T) * H, 1, true), conv_w = randn(3 * P * kK, 0.5f, false),
             conv0 = randn(int64_t(S) * (kK - 1) * 3 * P, 1, true), dt = randn(P, 0.5f, false),
             state0 = randn(int64_t(S) * H * kD * kD, 0.5f, false);
  std::vector<float> a_log;
  for (int h = 0; h < H; ++h) a_log.push_back(std::log(0.5f + 3.5f * u01(rng)));
  std::vector<float> out_c, out_g, st_c, st_g;
  for (int pass = 0; pass < 2; ++pass) {
    backend::Backend& be = pass == 0 ? *cpu : cuda;
    const DType act = pass == 0 ? DType::F32 : DType::BF16;
    Pool pool{be};
    Layout l;
    make_layout(be, seqs, l);
    backend::KdaPrepareArgs p;
    p.qkv = pool.put(qkv, act, {T, 3 * P});
    p.conv_weight = pool.put(conv_w, DType::F32, {3 * P, kK});
    p.conv_state = pool.put(conv0, act, {S, kK - 1, 3 * P});
    p.graw = pool.put(graw, act, {T, P});
    p.braw = pool.put(braw, act, {T, H});
    p.a_log = pool.put(a_log, DType::F32, {H});
    p.dt_bias = pool.put(dt, DType::F32, {P});
    p.n_heads = H;
    p.head_dim = kD;
    p.layout = &l.dev;
    p.q = pool.put(std::vector<float>(size_t(T) * P, 0), act, {T, H, kD});
    p.k = pool.put(std::vector<float>(size_t(T) * P, 0), act, {T, H, kD});
    p.v = pool.put(std::vector<float>(size_t(T) * P, 0), act, {T, H, kD});
    p.g = pool.put(std::vector<float>(size_t(T) * P, 0), DType::F32, {T, H, kD});
    p.beta = pool.put(std::vector<float>(size_t(T) * H, 0), DType::F32, {T, H});
    BENCH_CHECK(be.kda_prepare(p));
    backend::KdaAttentionArgs a{p.q,    p.k,
                                p.v,    p.g,
                                p.beta, pool.put(state0, DType::F32, {S, H, kD, kD}),
                                &l.dev, pool.put(std::vector<float>(size_t(T) * P, 0), act, {T, H, kD}),
                                nullptr};
    a.scratch = pool.scratch([&](backend::Backend& on, Arena* s) {
      auto b = a;
      b.scratch = s;
      return on.kda_attention(b);
    });
    BENCH_CHECK(be.kda_attention(a));
    (pass == 0 ? out_c : out_g) = fetch(be, a.out);
    (pass == 0 ? st_c : st_g) = fetch(be, a.state);
  }
  const double eo = rel_l2(out_g, out_c), es = rel_l2(st_g, st_c);
  std::printf("check vs CPU (H=4, prefill 200 + 70 and 2 decode rows): out rel-L2 %.2e, state %.2e: %s\n", eo,
              es, eo <= 1e-2 && es <= 1e-2 ? "ok" : "FAILED");
  return eo <= 1e-2 && es <= 1e-2;
}

struct Row {
  std::string name;
  double ms, bytes, flops, fla_ms;
};

void print(const Row& r, double copy_gbps) {
  const double gbps = r.bytes / (r.ms * 1e-3) / 1e9;
  std::printf("%-34s %9.3f ms %9.1f MB %8.0f GB/s %5.1f%% copy %8.2f GFLOP %7.1f TFLOP/s", r.name.c_str(),
              r.ms, r.bytes / 1e6, gbps, 100.0 * gbps / copy_gbps, r.flops / 1e9,
              r.flops / (r.ms * 1e-3) / 1e12);
  if (r.fla_ms > 0) std::printf("   fla %.3f ms (%.2fx)", r.fla_ms, r.fla_ms / r.ms);
  std::printf("\n");
}

double time_median(backend::Backend& be, const std::function<Status(int)>& body, int reps = 25) {
  for (int i = 0; i < 3; ++i) BENCH_CHECK(body(i));
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) ms.push_back(unwrap(be.time_ms([&] { return body(i); }), "time"));
  return median(ms);
}

// Attention (and prepare) over `seqs` with H = 32; `g_lo` sets how steep the decays are.
void bench_step(backend::Backend& be, const std::string& name, const std::vector<std::pair<int, int>>& seqs,
                float g_lo, double fla_ms, bool with_prepare, double copy_gbps) {
  const int H = 32, P = H * kD, S = int(seqs.size());
  int T = 0;
  for (auto [start, n] : seqs) T += n;
  Pool pool{be};
  Layout l;
  make_layout(be, seqs, l);
  const Shape act{T, H, kD};
  const TensorView q = pool.random(DType::BF16, act, -2, 2), k = pool.random(DType::BF16, act, -2, 2),
                   v = pool.random(DType::BF16, act, -2, 2), g = pool.random(DType::F32, act, g_lo, -0.001f),
                   beta = pool.random(DType::F32, {T, H}, 0, 1), out = pool.random(DType::BF16, act, -1, 1);
  // Rotate the states of decode steps through >= 256 MB so small batches are not timed out of L2.
  const double state_bytes = double(S) * H * kD * kD * 4;
  const int sets = T == S ? int(std::clamp(std::ceil(256e6 / state_bytes), 1.0, 16.0)) : 1;
  std::vector<TensorView> states;
  for (int i = 0; i < sets; ++i) states.push_back(pool.random(DType::F32, {S, H, kD, kD}, -0.1f, 0.1f));
  backend::KdaAttentionArgs a{q, k, v, g, beta, states[0], &l.dev, out, nullptr};
  a.scratch = pool.scratch([&](backend::Backend& on, Arena* s) {
    auto b = a;
    b.scratch = s;
    return on.kda_attention(b);
  });
  const double ms = time_median(be, [&](int i) {
    auto b = a;
    b.state = states[size_t(i % sets)];
    return be.kda_attention(b);
  });
  bool prefill = false;
  for (auto [start, n] : seqs) prefill |= n > 1;
  // Bytes: q, k, v, out bf16 + g fp32 + beta, plus the state read (not for fresh prefills) and written.
  const double io = double(T) * H * (kD * (2 * 4 + 4) + 4);
  const double bytes = io + state_bytes * (prefill ? 1 : 2);
  // FLOPs: chunked ~6d^2 + 6Cd per token and head (model_bench's count); the step ~8 d^2.
  const double flops = double(T) * H * (prefill ? 6.0 * kD * kD + 6.0 * 64 * kD : 8.0 * kD * kD);
  print({name, ms, bytes, flops, fla_ms}, copy_gbps);

  if (!with_prepare) return;
  backend::KdaPrepareArgs p;
  p.qkv = pool.random(DType::BF16, {T, 3 * P}, -2, 2);
  p.conv_weight = pool.random(DType::F32, {3 * P, kK}, -0.5f, 0.5f);
  p.conv_state = pool.random(DType::BF16, {S, kK - 1, 3 * P}, -1, 1);
  p.graw = pool.random(DType::BF16, {T, P}, -2, 2);
  p.braw = pool.random(DType::BF16, {T, H}, -2, 2);
  p.a_log = pool.random(DType::F32, {H}, -0.5f, 1.0f);
  p.dt_bias = pool.random(DType::F32, {P}, -0.5f, 0.5f);
  p.n_heads = H;
  p.head_dim = kD;
  p.layout = &l.dev;
  p.q = q, p.k = k, p.v = v, p.g = g, p.beta = beta;
  const double pms = time_median(be, [&](int) { return be.kda_prepare(p); });
  const double pbytes =
      double(T) * (3.0 * P * 2 * 2 + P * 2 + P * 4 + H * 6) + double(S) * 2 * (kK - 1) * 3 * P * 2;
  print({name + " prepare", pms, pbytes, double(T) * 3 * P * 2 * kK, 0}, copy_gbps);
}

}  // namespace

int main() {
  auto made = backend::make_backend("cuda");
  if (!made.ok()) {
    std::printf("kda_bench: no CUDA backend (%s); nothing to do\n",
                std::string(made.status().message()).c_str());
    return 0;
  }
  backend::Backend& be = *made.value();
  if (!validate(be)) return 1;

  // Device-to-device copy: 1 GiB each way (bytes read + bytes written).
  double copy_gbps = 0;
  {
    const size_t bytes = size_t(1) << 30;
    auto src = unwrap(be.allocate(bytes), "allocate"), dst = unwrap(be.allocate(bytes), "allocate");
    BENCH_CHECK(
        be.fill_random(TensorView::make(src.data(), DType::U8, {int64_t(bytes)}, be.device()), 1, 0, 255));
    const double ms = time_median(
        be, [&](int) { return be.copy_device_to_device(dst.data(), src.data(), bytes); }, 9);
    copy_gbps = 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
    std::printf("device-to-device copy: %.0f GB/s (read + write)\n\n", copy_gbps);
  }

  bench_step(be, "prefill B=1 T=8192 g~U(-1,0)", {{0, 8192}}, -1.0f, 1.065, true, copy_gbps);
  bench_step(be, "prefill B=1 T=8192 g~U(-12,0)", {{0, 8192}}, -12.0f, 1.065, false, copy_gbps);
  std::vector<std::pair<int, int>> b8(8, {0, 2048});
  bench_step(be, "prefill B=8 T=2048 g~U(-1,0)", b8, -1.0f, 2.06, true, copy_gbps);
  bench_step(be, "prefill B=8 T=2048 g~U(-12,0)", b8, -12.0f, 2.06, false, copy_gbps);
  const double fla_decode[] = {0.0376, 0.0464, 0.319};
  int i = 0;
  for (int B : {1, 32, 256}) {
    std::vector<std::pair<int, int>> dec(size_t(B), {4095, 1});
    bench_step(be, "decode B=" + std::to_string(B), dec, -1.0f, fla_decode[i++], true, copy_gbps);
  }
  return 0;
}
