// The heaviest ops of a model one at a time, at the model's real shape, on synthetic inputs.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "backend/cuda_backend_options.h"
#include "backend/workspace_planner.h"
#include "bench/driver/model_bench.h"
#include "model/step_batch.h"
#include "model/weights/loader.h"

namespace rill::bench {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device tensors for one benchmark, kept alive together.
class Pool {
 public:
  explicit Pool(backend::Backend& be) : be_(be) {}
  Result<TensorView> random(DType t, Shape s, float lo, float hi) {
    RILL_ASSIGN_OR_RETURN(auto a, be_.allocate(size_t(s.numel()) * dtype_size(t)));
    TensorView v = TensorView::make(a.data(), t, s, be_.device());
    RILL_TRY(be_.fill_random(v, seed_++, lo, hi));
    allocs_.push_back(std::move(a));
    return v;
  }
  // An output buffer (zeroed; the op overwrites it).
  Result<TensorView> zeros(DType t, Shape s) {
    RILL_ASSIGN_OR_RETURN(auto a, be_.allocate(size_t(s.numel()) * dtype_size(t)));
    TensorView v = TensorView::make(a.data(), t, s, be_.device());
    RILL_TRY(be_.fill_zero(v));
    allocs_.push_back(std::move(a));
    return v;
  }
  // A scratch arena sized by planning `op` (the same call the real run makes, on a planner for the backend).
  Result<Arena*> scratch_for(const std::function<Status(backend::Backend&, Arena*)>& op) {
    Arena measure(nullptr, 0, be_.device());
    backend::WorkspacePlanner planner(be_);
    RILL_TRY(op(planner, &measure));
    RILL_ASSIGN_OR_RETURN(auto a, be_.allocate(measure.high_water() + 256));
    arenas_.push_back(std::make_unique<Arena>(a.data(), a.size(), be_.device()));
    allocs_.push_back(std::move(a));
    return arenas_.back().get();
  }

 private:
  backend::Backend& be_;
  uint64_t seed_ = 7;
  std::vector<backend::DeviceAllocation> allocs_;
  std::vector<std::unique_ptr<Arena>> arenas_;
};

struct LayoutHolder {
  backend::BatchLayoutHost host;
  backend::BatchLayout dev;
};

// n_seqs sequences of n_new tokens each, starting at start_pos, slots 0.., blocks laid out consecutively.
Status make_layout(backend::Backend& be, int n_seqs, int n_new, int start_pos, LayoutHolder* l) {
  model::StepBatch b;
  const int per_seq = (start_pos + n_new + 63) / 64;
  for (int s = 0; s < n_seqs; ++s) {
    model::SequenceStep q;
    q.start_pos = start_pos;
    q.n_new = n_new;
    q.state_slot = s;
    for (int k = 0; k < per_seq; ++k) q.block_table.push_back(s * per_seq + k);
    b.seqs.push_back(q);
  }
  b.token_ids.assign(size_t(n_seqs) * size_t(n_new), 0);
  RILL_TRY(b.to_layout(64, &l->host));
  return be.upload_layout(l->host, 64, &l->dev);
}

Result<double> time_op(backend::Backend& be, int repeats, const std::function<Status()>& op) {
  std::vector<double> ms;
  for (int i = 0; i <= repeats; ++i) {
    RILL_ASSIGN_OR_RETURN(double t, be.time_ms(op));
    if (i) ms.push_back(t);
  }
  return median(ms);
}

}  // namespace

Result<std::vector<BenchRow>> bench_ops(backend::Backend& be, const model::ModelConfig& c, const BenchOptions& o) {
  std::vector<BenchRow> rows;
  const DType act = be.act_dtype();
  const int64_t H = c.hidden_size, Hk = c.kda.n_heads, d = c.kda.head_dim, P = c.kda.projection_size();
  const int reps = std::max(o.repeats, 10);

  {  // GEMM: the fused KDA q|k|v projection, decode and prefill sized.
    Pool pool(be);
    RILL_ASSIGN_OR_RETURN(TensorView w, pool.random(DType::BF16, {3 * P, H}, -0.02f, 0.02f));
    backend::LinearWeight lw{w};
    for (int64_t M : {int64_t(1), int64_t(o.prefill_long)}) {
      RILL_ASSIGN_OR_RETURN(TensorView x, pool.random(act, {M, H}, -1, 1));
      RILL_ASSIGN_OR_RETURN(TensorView y, pool.zeros(act, {M, 3 * P}));
      RILL_ASSIGN_OR_RETURN(double ms, time_op(be, reps, [&] { return be.gemm({x, &lw, y}); }));
      rows.push_back({"op", fmt::format("gemm qkv [{} x {}] x [{} x {}]^T", M, H, 3 * P, H), ms,
                      2.0 * double(M * H + 3 * P * H + M * 3 * P), 2.0 * double(M) * double(3 * P) * double(H), M <= 4 ? "rill GEMV (M <= 4)" : "cuBLASLt"});
    }
  }

  {  // KDA: chunked prefill of one long prompt; the recurrent step for a decode batch.
    for (const auto& [n_seqs, n_new] : {std::pair{1, o.prefill_long}, std::pair{256, 1}}) {
      Pool pool(be);
      const int64_t T = int64_t(n_seqs) * n_new;
      LayoutHolder lay;
      RILL_TRY(make_layout(be, n_seqs, n_new, n_new == 1 ? 1000 : 0, &lay));
      RILL_ASSIGN_OR_RETURN(TensorView q, pool.random(act, {T, Hk, d}, -1, 1));
      RILL_ASSIGN_OR_RETURN(TensorView k, pool.random(act, {T, Hk, d}, -1, 1));
      RILL_ASSIGN_OR_RETURN(TensorView v, pool.random(act, {T, Hk, d}, -1, 1));
      RILL_ASSIGN_OR_RETURN(TensorView g, pool.random(DType::F32, {T, Hk, d}, -0.5f, -0.01f));
      RILL_ASSIGN_OR_RETURN(TensorView beta, pool.random(DType::F32, {T, Hk}, 0.05f, 0.95f));
      RILL_ASSIGN_OR_RETURN(TensorView state, pool.random(DType::F32, {n_seqs, Hk, d, d}, -0.02f, 0.02f));
      RILL_ASSIGN_OR_RETURN(TensorView out, pool.zeros(act, {T, Hk, d}));
      backend::KdaAttentionArgs a{q, k, v, g, beta, state, &lay.dev, out, nullptr};
      RILL_ASSIGN_OR_RETURN(a.scratch, pool.scratch_for([&](backend::Backend& on, Arena* s) {
        auto b = a;
        b.scratch = s;
        return on.kda_attention(b);
      }));
      const double io = double(T) * Hk * d * (4 * dtype_size(act) + 4) + double(T) * Hk * 4;
      const double st = 2.0 * double(n_seqs) * Hk * d * d * 4;
      const double flops = double(T) * Hk * (6.0 * d * d + 6.0 * 64 * d);
      // The chunked prefill twice where the backend takes kda_intra_tensor_solve (CUDA): the intra phase's
      // tensor-core solve, then its forward substitution (the option's A/B).
      const bool serial_ab = n_new > 1 && be.set_option("kda_intra_tensor_solve", "0").ok();
      for (const bool serial : {false, true}) {
        if (serial && !serial_ab) continue;
        if (serial_ab) RILL_TRY(be.set_option("kda_intra_tensor_solve", serial ? "0" : "1"));
        RILL_ASSIGN_OR_RETURN(double ms, time_op(be, reps, [&] {
                                a.scratch->reset();
                                return be.kda_attention(a);
                              }));
        rows.push_back(
            {"op",
             n_new == 1 ? fmt::format("kda step, batch {} x {} heads", n_seqs, Hk)
                        : fmt::format("kda chunk, {} tokens x {} heads{}", n_new, Hk,
                                      !serial_ab ? ""
                                      : serial   ? ", serial solve"
                                                 : ", tensor-core solve"),
             ms, io + st, flops,
             n_new == 1 ? "fla fused_recurrent B=256: 0.319 ms" : "fla chunk_kda T=8192: 1.065 ms"});
      }
      if (serial_ab)  // back to the default for the rows after
        RILL_TRY(be.set_option("kda_intra_tensor_solve",
                               backend::CudaBackendOptions{}.kda_intra_tensor_solve ? "1" : "0"));
    }
  }

  {  // MLA: causal prefill attention from an empty cache; decode at the benchmark context.
    const int nh = c.mla.n_heads, R = c.mla.kv_lora_rank, rope = c.mla.qk_rope_head_dim, qk = c.mla.qk_head_dim(),
              vd = c.mla.v_head_dim;
    // On CUDA the prefill runs twice where the build has cuDNN: its fused attention (mla_prefill=cudnn, which
    // fails rather than fall back) and rill's flash kernel, each with its own dry-run scratch, in one run.
    const bool pf_ab = be.set_option("mla_prefill", "cudnn").ok() && be.set_option("mla_prefill", "rill").ok();
    struct MlaCase {
      int n_seqs, n_new, start;
      const char* path;  // mla_prefill value, or null: the backend's default
    };
    std::vector<MlaCase> cases;
    if (pf_ab) {
      cases.push_back({1, o.prefill_long, 0, "cudnn"});
      cases.push_back({1, o.prefill_long, 0, "rill"});
    } else {
      cases.push_back({1, o.prefill_long, 0, nullptr});
    }
    cases.push_back({64, 1, o.decode_context, nullptr});
    for (const auto& [n_seqs, n_new, start, path] : cases) {
      if (path) RILL_TRY(be.set_option("mla_prefill", path));
      Pool pool(be);
      const int64_t T = int64_t(n_seqs) * n_new;
      LayoutHolder lay;
      RILL_TRY(make_layout(be, n_seqs, n_new, start, &lay));
      const int64_t blocks = int64_t(n_seqs) * ((start + n_new + 63) / 64);
      RILL_ASSIGN_OR_RETURN(TensorView cache, pool.random(act, {blocks, 64, R + rope}, -1, 1));
      RILL_ASSIGN_OR_RETURN(TensorView q, pool.random(act, {T, nh, qk}, -1, 1));
      RILL_ASSIGN_OR_RETURN(TensorView kvb, pool.random(DType::BF16, {int64_t(nh) * (c.mla.qk_nope_head_dim + vd), R}, -0.05f, 0.05f));
      RILL_ASSIGN_OR_RETURN(TensorView out, pool.zeros(act, {T, int64_t(nh) * vd}));
      backend::LinearWeight kv_b{kvb};
      backend::MlaAttentionArgs a{q, cache, &kv_b, nh, c.mla.qk_nope_head_dim, rope, vd, R, 1.0f / std::sqrt(float(qk)),
                                  &lay.dev, out, nullptr};
      RILL_ASSIGN_OR_RETURN(a.scratch, pool.scratch_for([&](backend::Backend& on, Arena* s) { auto b = a; b.scratch = s; return on.mla_attention(b); }));
      auto timed = time_op(be, reps, [&] { a.scratch->reset(); return be.mla_attention(a); });
      if (path)  // the default again for the rows after
        RILL_TRY(be.set_option("mla_prefill", backend::mla_prefill_name(backend::CudaBackendOptions{}.mla_prefill)));
      RILL_ASSIGN_OR_RETURN(double ms, std::move(timed));
      const double ctx = start + n_new;
      BenchRow r{"op", "", ms, 0, 0, ""};
      if (n_new == 1) {
        r.name = fmt::format("mla decode, batch {} at {} context", n_seqs, start);
        r.bytes = double(n_seqs) * ctx * (R + rope) * dtype_size(act);
        r.flops = double(n_seqs) * nh * ctx * 2.0 * (R + rope + R);
        r.note = "absorbed, split-KV";
      } else {
        r.name = fmt::format("mla prefill, {} tokens x {} heads", n_new, nh);
        if (path) r.name += std::string(path) == "cudnn" ? ", cuDNN fused attention" : ", rill flash kernel";
        r.bytes = double(T) * (nh * (qk + vd) + R + rope) * dtype_size(act);
        r.flops = double(nh) * ctx * ctx / 2 * 2.0 * (qk + vd);
        r.note = "SDPA causal T=8192: 1.24 ms; gather + expansion included";
      }
      rows.push_back(r);
    }
  }

  if (c.moe.n_experts > 0) {  // MoE: route + experts for a prefill-sized and a decode-sized batch.
    Pool pool(be);
    const int64_t E = c.moe.n_experts, I = c.moe.intermediate_size, K = c.moe.n_experts_per_token;
    // K3's latent MoE routes on the hidden state and runs its experts on the latent width, MXFP4-packed.
    const int64_t Hx = c.moe.latent_size > 0 ? c.moe.latent_size : H;
    const bool mxfp4 = c.mxfp4_experts;
    RILL_ASSIGN_OR_RETURN(TensorView router, pool.random(DType::BF16, {E, H}, -0.05f, 0.05f));
    RILL_ASSIGN_OR_RETURN(TensorView bias, pool.random(DType::F32, {E}, -0.1f, 0.1f));
    backend::ExpertWeights ex;
    if (mxfp4) {
      ex.format = backend::WeightFormat::Mxfp4;
      const int e_gu = model::dummy_mxfp4_scale(Hx), e_dn = model::dummy_mxfp4_scale(I);
      RILL_ASSIGN_OR_RETURN(ex.gate_up, pool.random(DType::U8, {E, 2 * I, Hx / 2}, 0, 255));
      RILL_ASSIGN_OR_RETURN(ex.gate_up_scales,
                            pool.random(DType::U8, {E, 2 * I, Hx / 32}, float(e_gu - 1), float(e_gu)));
      RILL_ASSIGN_OR_RETURN(ex.down, pool.random(DType::U8, {E, Hx, I / 2}, 0, 255));
      RILL_ASSIGN_OR_RETURN(ex.down_scales, pool.random(DType::U8, {E, Hx, I / 32}, float(e_dn - 1), float(e_dn)));
    } else {
      RILL_ASSIGN_OR_RETURN(ex.gate_up, pool.random(DType::BF16, {E, 2 * I, H}, -0.03f, 0.03f));
      RILL_ASSIGN_OR_RETURN(ex.down, pool.random(DType::BF16, {E, H, I}, -0.03f, 0.03f));
    }
    // The router alone, both of its prefill paths (moe_route_gemm_min_tokens): the logits GEMM + selection
    // kernel, and the cluster kernel that reads the router once per 8 tokens. Only where the backend has the
    // option (CUDA).
    if (be.set_option("moe_route_gemm_min_tokens", "1").ok()) {
      for (int64_t T : {int64_t(o.prefill_long), int64_t(2048), int64_t(256), int64_t(64), int64_t(32), int64_t(8)}) {
        for (const bool gemm : {true, false}) {
          RILL_TRY(be.set_option("moe_route_gemm_min_tokens", gemm ? "1" : "1073741824"));
          const std::string name = fmt::format("moe route, {} tokens, {} experts, {}", T, E,
                                               gemm ? "logits GEMM + selection" : "cluster kernel");
          auto row = [&]() -> Result<BenchRow> {
            RILL_ASSIGN_OR_RETURN(TensorView x, pool.random(act, {T, H}, -1, 1));
            RILL_ASSIGN_OR_RETURN(TensorView ids, pool.zeros(DType::I32, {T, K}));
            RILL_ASSIGN_OR_RETURN(TensorView wts, pool.zeros(DType::F32, {T, K}));
            const backend::MoeRouteArgs route{x,   router, bias, int(K), c.moe.n_groups, c.moe.topk_group,
                                              c.moe.renormalize, false, c.moe.routed_scaling_factor, ids, wts};
            RILL_ASSIGN_OR_RETURN(double ms, time_op(be, reps, [&] { return be.moe_route(route); }));
            return BenchRow{"op", name, ms, double(E) * H * 2 + double(T) * H * 2, 2.0 * double(T) * H * E,
                            gemm ? "cuBLASLt GEMM, fp32 logits" : "8-CTA clusters"};
          }();
          if (!row.ok() && row.status().code() != StatusCode::Unimplemented) return row.status();
          rows.push_back(row.ok() ? *row : not_run("op", name, row.status().message()));
        }
      }
      RILL_TRY(be.set_option("moe_route_gemm_min_tokens",
                             std::to_string(backend::CudaBackendOptions{}.moe_route_gemm_min_tokens)));
    }
    const bool situ = c.activation == model::GluActivation::Situ;
    const double bytes_per_weight = mxfp4 ? 0.5 + 1.0 / 32 : 2.0;  // MXFP4: FP4 codes + one E8M0 scale per 32
    // Prefill-sized, mid-sized and decode-sized steps. On CUDA the bf16 grouped steps run up to three times
    // in one run: cuBLAS's grouped GEMM (the unnamed row, with moe_wgmma off), rill's mma.sync grouped kernels,
    // and (on Hopper, option moe_wgmma, the default there) rill's TMA + wgmma kernels. (cuBLAS at every grouped
    // size here, to show where its per-layer count readback pays.) The wgmma row is left out where the backend
    // refuses the option.
    const bool ab = !mxfp4 && be.set_option("moe_cublas_grouped", "0").ok() &&
                    be.set_option("moe_cublas_grouped", "1").ok() && be.set_option("moe_cublas_min_pairs", "0").ok();
    const bool wgmma = ab && be.set_option("moe_wgmma", "1").ok() && be.set_option("moe_wgmma", "0").ok();
    // MXFP4 experts: the mma.sync grouped GEMM (the unnamed row, moe_wgmma_mxfp4 off) and, where the backend
    // takes the option, the Hopper kernel's MXFP4 policy at every size (moe_wgmma_mxfp4_min_pairs 0: the A/B
    // that decides the option's default and its threshold).
    const backend::CudaBackendOptions defaults{};
    const char* mxfp4_default = defaults.moe_wgmma_mxfp4 ? "1" : "0";
    const bool wgmma4 = mxfp4 && be.set_option("moe_wgmma_mxfp4", "1").ok() &&
                        be.set_option("moe_wgmma_mxfp4", "0").ok() &&
                        be.set_option("moe_wgmma_mxfp4_min_pairs", "0").ok();
    enum class MoePath { Default, RillMma, RillWgmma };
    for (int64_t T : {int64_t(o.prefill_long), int64_t(2048), int64_t(512), int64_t(256), int64_t(1), int64_t(32)}) {
      const bool grouped = T * K > 64;  // moe/params.h kDecodeMaxPairs
      for (const MoePath variant : {MoePath::Default, MoePath::RillMma, MoePath::RillWgmma}) {
        const bool rill_grouped = variant == MoePath::RillMma, rill_wgmma = variant == MoePath::RillWgmma;
        if (rill_grouped && !(ab && grouped)) continue;
        if (rill_wgmma && !((wgmma || wgmma4) && grouped)) continue;
        std::string name = mxfp4 ? fmt::format("moe route+experts, {} tokens, {} of {} MXFP4 experts", T, K, E)
                                 : fmt::format("moe route+experts, {} tokens, {} of {} experts", T, K, E);
        const char* path = !grouped              ? "gathered GEMV"
                           : rill_wgmma          ? "grouped GEMM (TMA + wgmma)"
                           : ab && !rill_grouped ? "cuBLAS grouped GEMM"
                                                 : "grouped GEMM (mma.sync)";
        if (ab && rill_grouped) name += ", rill's grouped GEMM";
        if (rill_wgmma) name += ", rill's wgmma grouped GEMM";
        if (rill_grouped) RILL_TRY(be.set_option("moe_cublas_grouped", "0"));
        if (rill_wgmma) RILL_TRY(be.set_option(mxfp4 ? "moe_wgmma_mxfp4" : "moe_wgmma", "1"));
        auto row = [&]() -> Result<BenchRow> {
          RILL_ASSIGN_OR_RETURN(TensorView x, pool.random(act, {T, H}, -1, 1));
          TensorView xe = x;
          if (Hx != H) {
            RILL_ASSIGN_OR_RETURN(xe, pool.random(act, {T, Hx}, -1, 1));
          }
          RILL_ASSIGN_OR_RETURN(TensorView ids, pool.zeros(DType::I32, {T, K}));
          RILL_ASSIGN_OR_RETURN(TensorView wts, pool.zeros(DType::F32, {T, K}));
          RILL_ASSIGN_OR_RETURN(TensorView out, pool.zeros(act, {T, Hx}));
          backend::MoeRouteArgs route{x, router, bias, int(K), c.moe.n_groups, c.moe.topk_group, c.moe.renormalize, false,
                                      c.moe.routed_scaling_factor, ids, wts};
          backend::MoeExpertsArgs exa{xe, ids, wts, &ex, situ ? backend::Activation::Situ : backend::Activation::Silu,
                                      situ ? c.situ_beta : 0.0f, situ ? c.situ_linear_beta : 0.0f, out, nullptr};
          RILL_ASSIGN_OR_RETURN(exa.scratch, pool.scratch_for([&](backend::Backend& on, Arena* s) { auto b = exa; b.scratch = s; return on.moe_experts(b); }));
          RILL_ASSIGN_OR_RETURN(double ms, time_op(be, reps, [&]() -> Status {
            exa.scratch->reset();
            RILL_TRY(be.moe_route(route));
            return be.moe_experts(exa);
          }));
          const double unique = double(E) * (1.0 - std::pow(1.0 - double(K) / double(E), double(T)));
          return BenchRow{"op", name, ms,
                          unique * 3.0 * double(Hx) * double(I) * bytes_per_weight + double(T) * Hx * 2 * 2,
                          double(T) * K * 3.0 * 2.0 * double(Hx) * double(I), path};
        }();
        if (rill_grouped) RILL_TRY(be.set_option("moe_cublas_grouped", "1"));
        if (rill_wgmma) RILL_TRY(be.set_option(mxfp4 ? "moe_wgmma_mxfp4" : "moe_wgmma", "0"));
        if (!row.ok() && row.status().code() != StatusCode::Unimplemented) return row.status();
        rows.push_back(row.ok() ? *row : not_run("op", name, row.status().message()));
      }
    }
    if (wgmma4) {
      RILL_TRY(be.set_option("moe_wgmma_mxfp4", mxfp4_default));
      RILL_TRY(be.set_option("moe_wgmma_mxfp4_min_pairs", std::to_string(defaults.moe_wgmma_mxfp4_min_pairs)));
    }
    // FP8 experts (E4M3, 128 x 128 F32 block scales: the --quantization fp8 layout) at the grouped sizes: the
    // dequantising mma.sync GEMM and, on Hopper where the backend takes the option (the default there), the
    // FP8 wgmma kernels (moe_wgmma_fp8), then the same codes with one scale per weight row (ptpc_fp8's
    // layout) on them. Same routing and timing as the rows above. Only on backends with the option (CUDA), so
    // a CPU run does not time FP8 experts at prefill sizes.
    if (!mxfp4 && Hx == H && H % 128 == 0 && I % 128 == 0 && be.set_option("moe_wgmma_fp8", "0").ok()) {
      backend::ExpertWeights ex8;
      ex8.format = backend::WeightFormat::Fp8;
      ex8.block = {128, 128};
      auto codes =
          [&](Shape s) -> Result<TensorView> {  // non-negative finite E4M3 bytes; signs from the scales
        RILL_ASSIGN_OR_RETURN(TensorView u8, pool.random(DType::U8, s, 0.0f, 126.0f));
        return TensorView::make(u8.data, DType::F8E4M3, u8.shape, u8.device);
      };
      RILL_ASSIGN_OR_RETURN(ex8.gate_up, codes({E, 2 * I, H}));
      RILL_ASSIGN_OR_RETURN(ex8.gate_up_scales,
                            pool.random(DType::F32, {E, 2 * I / 128, H / 128}, -1e-4f, 1e-4f));
      RILL_ASSIGN_OR_RETURN(ex8.down, codes({E, H, I}));
      RILL_ASSIGN_OR_RETURN(ex8.down_scales, pool.random(DType::F32, {E, H / 128, I / 128}, -1e-4f, 1e-4f));
      backend::ExpertWeights ex8c = ex8;
      ex8c.block = {1, backend::Fp8Blocks::kWholeRow};
      RILL_ASSIGN_OR_RETURN(ex8c.gate_up_scales, pool.random(DType::F32, {E, 2 * I, 1}, -1e-4f, 1e-4f));
      RILL_ASSIGN_OR_RETURN(ex8c.down_scales, pool.random(DType::F32, {E, H, 1}, -1e-4f, 1e-4f));
      const bool wgmma8 = be.set_option("moe_wgmma_fp8", "1").ok();
      RILL_TRY(be.set_option("moe_wgmma_fp8", "0"));
      for (int64_t T : {int64_t(o.prefill_long), int64_t(2048), int64_t(512), int64_t(256)}) {
        for (const int variant : {0, 1, 2}) {  // mma.sync dequantising, wgmma, wgmma per channel
          const bool on = variant > 0, channel = variant == 2;
          if (on && !wgmma8) continue;
          std::string name = fmt::format("moe route+experts, {} tokens, {} of {} FP8 experts", T, K, E);
          if (on)
            name += channel ? ", per-channel scales, rill's FP8 wgmma grouped GEMM"
                            : ", rill's FP8 wgmma grouped GEMM";
          if (on) RILL_TRY(be.set_option("moe_wgmma_fp8", "1"));
          auto row = [&]() -> Result<BenchRow> {
            RILL_ASSIGN_OR_RETURN(TensorView x, pool.random(act, {T, H}, -1, 1));
            RILL_ASSIGN_OR_RETURN(TensorView ids, pool.zeros(DType::I32, {T, K}));
            RILL_ASSIGN_OR_RETURN(TensorView wts, pool.zeros(DType::F32, {T, K}));
            RILL_ASSIGN_OR_RETURN(TensorView out, pool.zeros(act, {T, H}));
            backend::MoeRouteArgs route{x,
                                        router,
                                        bias,
                                        int(K),
                                        c.moe.n_groups,
                                        c.moe.topk_group,
                                        c.moe.renormalize,
                                        false,
                                        c.moe.routed_scaling_factor,
                                        ids,
                                        wts};
            backend::MoeExpertsArgs exa{x,
                                        ids,
                                        wts,
                                        channel ? &ex8c : &ex8,
                                        situ ? backend::Activation::Situ : backend::Activation::Silu,
                                        situ ? c.situ_beta : 0.0f,
                                        situ ? c.situ_linear_beta : 0.0f,
                                        out,
                                        nullptr};
            RILL_ASSIGN_OR_RETURN(exa.scratch, pool.scratch_for([&](backend::Backend& on_be, Arena* s) {
              auto b = exa;
              b.scratch = s;
              return on_be.moe_experts(b);
            }));
            RILL_ASSIGN_OR_RETURN(double ms, time_op(be, reps, [&]() -> Status {
                                    exa.scratch->reset();
                                    RILL_TRY(be.moe_route(route));
                                    return be.moe_experts(exa);
                                  }));
            const double unique = double(E) * (1.0 - std::pow(1.0 - double(K) / double(E), double(T)));
            return BenchRow{
                "op",
                name,
                ms,
                unique * 3.0 * double(H) * double(I) * (1.0 + 4.0 / (128 * 128)) + double(T) * H * 2 * 2,
                double(T) * K * 3.0 * 2.0 * double(H) * double(I),
                channel ? "grouped GEMM (TMA + wgmma m64n256k32, E4M3, per-token x per-channel scales)"
                : on    ? "grouped GEMM (TMA + wgmma, E4M3)"
                        : "grouped GEMM (mma.sync, dequantised FP8)"};
          }();
          if (on) RILL_TRY(be.set_option("moe_wgmma_fp8", "0"));
          if (!row.ok() && row.status().code() != StatusCode::Unimplemented) return row.status();
          rows.push_back(row.ok() ? *row : not_run("op", name, row.status().message()));
        }
      }
      if (wgmma8)  // back to the defaults for the whole-model rows
        RILL_TRY(be.set_option("moe_wgmma_fp8", backend::CudaBackendOptions{}.moe_wgmma_fp8 ? "1" : "0"));
    }
    if (ab)  // back to the defaults for the whole-model rows (the caller re-applies --backend-option values)
      RILL_TRY(be.set_option("moe_cublas_min_pairs",
                             std::to_string(backend::CudaBackendOptions{}.moe_cublas_min_pairs)));
    if (wgmma) RILL_TRY(be.set_option("moe_wgmma", backend::CudaBackendOptions{}.moe_wgmma ? "1" : "0"));
  }

  if (c.attn_res_block_size > 0) {  // K3 Block AttnRes depth mix, at the deepest layer's candidate count.
    // The full K3 mixes up to 9 candidates (8 block snapshots + the partial sum, spec §1.3) twice per layer;
    // a slice of few layers sees fewer, so this row bounds what its layer timings leave out.
    const int64_t N = 9;
    for (int64_t T : {int64_t(o.prefill_long), int64_t(32)}) {
      Pool pool(be);
      RILL_ASSIGN_OR_RETURN(TensorView cand, pool.random(act, {N, T, H}, -1, 1));
      RILL_ASSIGN_OR_RETURN(TensorView norm, pool.random(DType::F32, {H}, 0.9f, 1.1f));
      RILL_ASSIGN_OR_RETURN(TensorView proj, pool.random(DType::F32, {H}, -0.02f, 0.02f));
      RILL_ASSIGN_OR_RETURN(TensorView out, pool.zeros(act, {T, H}));
      RILL_ASSIGN_OR_RETURN(double ms, time_op(be, reps, [&] {
        return be.attn_res_mix({cand, norm, proj, c.rms_norm_eps, out});
      }));
      // Per candidate and element: square, key product, weighted sum (~6 FLOPs); candidates read, output written.
      rows.push_back({"op", fmt::format("attn_res mix, {} candidates x [{} x {}]", N, T, H), ms,
                      double(N + 1) * double(T) * H * dtype_size(act), 6.0 * double(N) * double(T) * H, ""});
    }
  }

  {  // RMSNorm over a prefill-sized batch.
    Pool pool(be);
    const int64_t T = o.prefill_long;
    RILL_ASSIGN_OR_RETURN(TensorView x, pool.random(act, {T, H}, -1, 1));
    RILL_ASSIGN_OR_RETURN(TensorView w, pool.random(DType::F32, {H}, 0.9f, 1.1f));
    RILL_ASSIGN_OR_RETURN(TensorView y, pool.zeros(act, {T, H}));
    RILL_ASSIGN_OR_RETURN(double ms, time_op(be, reps, [&] { return be.rms_norm({x, w, c.rms_norm_eps, y}); }));
    rows.push_back({"op", fmt::format("rms_norm [{} x {}]", T, H), ms, 2.0 * double(T) * H * dtype_size(act), 4.0 * T * H, ""});
  }
  return rows;
}

}  // namespace rill::bench
