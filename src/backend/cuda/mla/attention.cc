// launch_mla_attention: validates the call, plans it (decode_plan.cc), carves the scratch and runs the phases
// on the compute stream: device plan; decode sequences (n_new <= kDecodeMaxNew) through absorb -> split-KV ->
// combine -> W_UV; prefill sequences through gather -> kv_b expansion (cuBLASLt via GemmRunner) -> attention,
// cuDNN's fused attention (prefill_sdpa.cc, mla_prefill = auto | cudnn) or rill's flash kernel.
#include <cstdint>

#include "backend/cuda/common/align.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/gemm/gemm_runner.h"
#include "backend/cuda/mla/mla.h"
#include "backend/cuda/mla/phases.h"

namespace rill::cuda {
namespace mla {
namespace {

// Shapes and dtypes the kernels are built for; a failure names the unsupported value.
Status check_args(const backend::MlaAttentionArgs& a) {
  const char* op = "mla_attention (CUDA)";
  if (a.nope != kNope)
    return invalid_argument("{}: qk_nope_head_dim {} unsupported (kernels are built for {})", op, a.nope,
                            kNope);
  if (a.rope != kRope)
    return invalid_argument("{}: qk_rope_head_dim {} unsupported (kernels are built for {})", op, a.rope,
                            kRope);
  if (a.v_dim != kV)
    return invalid_argument("{}: v_head_dim {} unsupported (kernels are built for {})", op, a.v_dim, kV);
  if (a.kv_lora != kLora)
    return invalid_argument("{}: kv_lora_rank {} unsupported (kernels are built for {})", op, a.kv_lora,
                            kLora);
  if (a.n_heads < 1 || a.n_heads > 65535) return invalid_argument("{}: {} heads unsupported", op, a.n_heads);
  if (a.q.dtype != DType::BF16 || a.cache.dtype != DType::BF16 || a.out.dtype != DType::BF16)
    return invalid_argument("{}: q, cache and out must be BF16 (got {}, {}, {})", op, dtype_name(a.q.dtype),
                            dtype_name(a.cache.dtype), dtype_name(a.out.dtype));
  if (a.kv_b->format != backend::WeightFormat::Dense || a.kv_b->weight.dtype != DType::BF16)
    return invalid_argument("{}: kv_b must be a dense BF16 matrix, got {}", op, a.kv_b->weight.describe());
  if (!a.layout->host) return invalid_argument("{}: layout has no host description", op);
  if (a.layout->block_size < 1) return invalid_argument("{}: block size {}", op, a.layout->block_size);
  return {};
}

Status check_alignment(const backend::MlaAttentionArgs& a) {
  const TensorView& w = a.kv_b->weight;
  if (!aligned16(a.q.data) || a.q.stride(0) % 8 || a.q.stride(1) % 8)
    return invalid_argument("mla_attention (CUDA): q {} rows and heads must be 16-byte aligned",
                            a.q.describe());
  if (!aligned16(a.cache.data) || a.cache.stride(0) % 8 || a.cache.stride(1) % 8)
    return invalid_argument("mla_attention (CUDA): cache {} rows must be 16-byte aligned",
                            a.cache.describe());
  if (!aligned16(a.out.data) || a.out.stride(0) % 8)
    return invalid_argument("mla_attention (CUDA): out {} rows must be 16-byte aligned", a.out.describe());
  if (!aligned16(w.data) || w.stride(0) % 8)
    return invalid_argument("mla_attention (CUDA): kv_b {} rows must be 16-byte aligned", w.describe());
  return {};
}

}  // namespace

}  // namespace mla

size_t mla_attention_scratch_bytes(const backend::MlaAttentionArgs& a, const CudaContext& cx) {
  if (!a.layout || !a.kv_b || a.layout->n_tokens == 0 || !mla::check_args(a).ok()) return 0;
  mla::Plan plan;
  if (!mla::make_plan(a, cx, &plan).ok()) return 0;
  return plan.bytes;
}

Status launch_mla_attention(const backend::MlaAttentionArgs& a, const CudaContext& cx) {
  using namespace mla;
  RILL_TRY(check_args(a));
  RILL_TRY(check_alignment(a));
  const backend::BatchLayout& l = *a.layout;
  if (l.n_tokens == 0) return {};
  if (!cx.gemm) return internal_error("mla_attention (CUDA): no GEMM runner in the context");
  Plan plan;
  RILL_TRY(make_plan(a, cx, &plan));  // the same plan as the scratch query's
  if (!a.scratch)
    return internal_error("mla_attention (CUDA): needs {} scratch bytes but has no arena", plan.bytes);
  const size_t mark = a.scratch->used();
  char* base = static_cast<char*>(a.scratch->alloc(DType::U8, {int64_t(plan.bytes)}).data);

  const int n = plan.n_seqs, H = a.n_heads;
  int32_t* ints = reinterpret_cast<int32_t*>(base + plan.off_ints);
  PlanArrays arr;
  arr.dec_work_start = ints;
  arr.dec_tok_start = ints + (n + 1);
  arr.dec_slot_start = ints + 2 * (n + 1);
  arr.pf_tile_start = ints + 3 * (n + 1);
  arr.pf_row_start = ints + 4 * (n + 1);
  arr.dec_splits = ints + 5 * (n + 1);
  arr.dec_split_keys = arr.dec_splits + n;
  arr.dec_tokens = arr.dec_split_keys + n;
  const PlanParams pl{.seq_token_start = l.seq_token_start,
                      .seq_start_pos = l.seq_start_pos,
                      .out = arr,
                      .n_seqs = n,
                      .n_heads = H,
                      .tiles_per_split = plan.tiles_per_split,
                      .fixed_splits = plan.fixed_splits};
  RILL_TRY(launch_plan(pl, cx.stream));

  const bf16* q = static_cast<const bf16*>(a.q.data);
  const bf16* cache = static_cast<const bf16*>(a.cache.data);
  const bf16* kvb = static_cast<const bf16*>(a.kv_b->weight.data);
  const int64_t kvb_ld = a.kv_b->weight.stride(0);
  bf16* out = static_cast<bf16*>(a.out.data);
  const float scale_log2 = a.scale * 1.4426950408889634f;

  if (plan.dec_tokens > 0) {
    bf16* q_lat = reinterpret_cast<bf16*>(base + plan.off_q_lat);
    float* part_o = reinterpret_cast<float*>(base + plan.off_part_o);
    float* part_ml = reinterpret_cast<float*>(base + plan.off_part_ml);
    bf16* lat = reinterpret_cast<bf16*>(base + plan.off_lat);
    // (i) q_lat[d, h] = W_UK,h^T q_nope[t(d), h]: W_UK,h = kv_b rows [h*256, +128), stored K x N.
    const HeadGemmParams absorb{.a = q,
                                .a_row = a.q.stride(0),
                                .a_head = a.q.stride(1),
                                .a_rows = arr.dec_tokens,
                                .b = kvb,
                                .b_ld = kvb_ld,
                                .b_head = kvb_ld * kKvbRows,
                                .c = q_lat,
                                .c_row = int64_t(H) * kLora,
                                .c_head = kLora,
                                .c_rows = nullptr,
                                .m = plan.dec_tokens,
                                .n = kLora,
                                .k = kNope};
    RILL_TRY(launch_head_gemm(absorb, /*b_is_kn=*/true, H, cx.stream));
    // (ii) split-KV attention over the paged cache.
    DecodeParams dp{};
    dp.q = q;
    dp.q_row = a.q.stride(0);
    dp.q_head = a.q.stride(1);
    dp.q_lat = q_lat;
    dp.cache = cache;
    dp.cache_block = a.cache.stride(0);
    dp.cache_row = a.cache.stride(1);
    dp.block_tables = l.block_tables;
    dp.seq_token_start = l.seq_token_start;
    dp.seq_start_pos = l.seq_start_pos;
    dp.token_pos = l.token_pos;
    dp.plan = arr;
    dp.part_o = part_o;
    dp.part_ml = part_ml;
    dp.n_blocks = int(a.cache.size(0));
    dp.block_size = l.block_size;
    dp.max_blocks_per_seq = l.max_blocks_per_seq;
    dp.n_seqs = n;
    dp.n_heads = H;
    dp.n_work = plan.dec_work;
    dp.scale_log2 = scale_log2;
    RILL_TRY(launch_decode_splitkv(dp, cx));
    // (iii) LSE combine into lat[d, h, 512].
    const CombineParams cp{.part_o = part_o,
                           .part_ml = part_ml,
                           .lat = lat,
                           .plan = arr,
                           .token_seq = l.token_seq,
                           .seq_token_start = l.seq_token_start,
                           .n_heads = H,
                           .n_rows = plan.dec_tokens * H};
    RILL_TRY(launch_decode_combine(cp, cx.stream));
    // (iv) out[t(d), h*128 + j] = W_UV,h lat[d, h]: W_UV,h = kv_b rows [h*256 + 128, +128), stored N x K.
    const HeadGemmParams up{.a = lat,
                            .a_row = int64_t(H) * kLora,
                            .a_head = kLora,
                            .a_rows = nullptr,
                            .b = kvb + kNope * kvb_ld,
                            .b_ld = kvb_ld,
                            .b_head = kvb_ld * kKvbRows,
                            .c = out,
                            .c_row = a.out.stride(0),
                            .c_head = kV,
                            .c_rows = arr.dec_tokens,
                            .m = plan.dec_tokens,
                            .n = kV,
                            .k = kLora};
    RILL_TRY(launch_head_gemm(up, /*b_is_kn=*/false, H, cx.stream));
  }

  // Prefill sequences, one expansion group after another through the same ctx / kvx scratch (stream order).
  bf16* ctx = reinterpret_cast<bf16*>(base + plan.off_ctx);
  bf16* kvx = reinterpret_cast<bf16*>(base + plan.off_kvx);
  for (const ExpandGroup& g : plan.groups) {
    const GatherParams gp{.cache = cache,
                          .cache_block = a.cache.stride(0),
                          .cache_row = a.cache.stride(1),
                          .block_tables = l.block_tables,
                          .pf_row_start = arr.pf_row_start,
                          .ctx = ctx,
                          .n_blocks = int(a.cache.size(0)),
                          .block_size = l.block_size,
                          .max_blocks_per_seq = l.max_blocks_per_seq,
                          .n_seqs = n,
                          .row_begin = g.row_begin,
                          .row_end = g.row_end};
    RILL_TRY(launch_gather(gp, cx.stream));
    // kvx = c kv_b^T: [rows, 512] (rows 576 apart) x [H*256, 512]^T -> [rows, H*256].
    const int64_t rows = g.row_end - g.row_begin;
    const TensorView x = TensorView::make(ctx, DType::BF16, {rows, kLatK}, Device::Cuda).narrow(1, 0, kLora);
    const TensorView y = TensorView::make(kvx, DType::BF16, {rows, int64_t(H) * kKvbRows}, Device::Cuda);
    RILL_TRY(cx.gemm->run(backend::GemmArgs{x, a.kv_b, y}, cx.stream));
    if (plan.sdpa) {
      const SdpaGroupArgs sg{.a = &a,
                             .group = &g,
                             .ctx = ctx,
                             .kvx = kvx,
                             .k = reinterpret_cast<bf16*>(base + plan.off_k),
                             .arrays = base + plan.off_sdpa,
                             .stats = reinterpret_cast<float*>(base + plan.off_stats)};
      RILL_ASSIGN_OR_RETURN(const bool done, run_prefill_sdpa(sg, cx));
      if (done) continue;
    }
    const PrefillParams pp{.q = q,
                           .q_row = a.q.stride(0),
                           .q_head = a.q.stride(1),
                           .kvx = kvx,
                           .ctx = ctx,
                           .out = out,
                           .out_row = a.out.stride(0),
                           .seq_token_start = l.seq_token_start,
                           .seq_start_pos = l.seq_start_pos,
                           .pf_tile_start = arr.pf_tile_start,
                           .pf_row_start = arr.pf_row_start,
                           .n_seqs = n,
                           .n_heads = H,
                           .tile_begin = g.tile_begin,
                           .tile_end = g.tile_end,
                           .row_begin = g.row_begin,
                           .scale_log2 = scale_log2};
    RILL_TRY(launch_prefill(pp, cx));
  }
  a.scratch->release_to(mark);  // stream-ordered: later users of this scratch run after these kernels
  return {};
}

}  // namespace rill::cuda
