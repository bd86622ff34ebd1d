// Split-KV combine: each (decode token, head) row merges its sequence's split partials with LSE weights,
// lat = sum_j 2^(m_j - M) o_j / sum_j 2^(m_j - M) l_j, and stores lat in bf16 for the W_UV GEMM.
// Few rows (small batches, many splits each): a block per row, warp w takes splits j = w, w + 8, ... so eight
// splits' 2 KB partials are read at once (one warp walking the ~60 splits of a batch-1 decode one after
// another took 21 us), and the eight warp sums are added in a fixed order in shared memory. Many rows: a warp
// per row walks its few splits.
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/mla/device.cuh"
#include "backend/cuda/mla/phases.h"

namespace rill::cuda::mla {
namespace {

constexpr int kWarps = 8;
constexpr int kWideRowsBelow = 1024;  // 32 heads x 32 decode tokens

// Row q's partials: `base` its slot in split 0, `stride` the slots between splits, `n` its sequence's splits.
struct CombineRow {
  int64_t base;
  int stride, n;
};
__device__ __forceinline__ CombineRow combine_row(const CombineParams& p, int q) {
  const int H = p.n_heads, d = q / H, h = q % H;
  const int s = p.token_seq[p.plan.dec_tokens[d]];
  CombineRow row;
  row.stride = (p.seq_token_start[s + 1] - p.seq_token_start[s]) * H;
  row.n = p.plan.dec_splits[s];
  row.base = int64_t(p.plan.dec_slot_start[s]) + (d - p.plan.dec_tok_start[s]) * H + h;
  return row;
}

// Splits j = first, first + step, ... of the row, each weighted by 2^(m_j - M), M the largest m of all its
// splits (every warp finds the same maximum: cheap, 8 bytes per split): returns the weighted sum of l and
// leaves that of o in acc (this lane's four float4 of the kLora columns).
__device__ __forceinline__ float accumulate_splits(const CombineParams& p, const CombineRow& row, int first,
                                                   int step, int lane, float4 (&acc)[4]) {
  float M = -INFINITY;
  for (int j = lane; j < row.n; j += 32) M = fmaxf(M, p.part_ml[(row.base + int64_t(j) * row.stride) * 2]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));

#pragma unroll
  for (int c = 0; c < 4; ++c) acc[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float L = 0.0f;
  for (int j = first; j < row.n; j += step) {
    const int64_t slot = row.base + int64_t(j) * row.stride;
    const float2 ml = *reinterpret_cast<const float2*>(p.part_ml + slot * 2);
    if (ml.x == -INFINITY) continue;  // nothing of this row in the split (same for the whole warp)
    const float wgt = exp2f(ml.x - M);
    L += wgt * ml.y;
    const float4* src = reinterpret_cast<const float4*>(p.part_o + slot * kLora);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const float4 v = src[lane + 32 * c];
      acc[c].x += wgt * v.x;
      acc[c].y += wgt * v.y;
      acc[c].z += wgt * v.z;
      acc[c].w += wgt * v.w;
    }
  }
  return L;
}

__global__ void __launch_bounds__(kWarps * 32) decode_combine_wide_kernel(const CombineParams p) {
  pdl_prologue();
  __shared__ float4 part_o[kWarps][kLora / 4];
  __shared__ float part_l[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int q = blockIdx.x;
  float4 acc[4];
  const float L = accumulate_splits(p, combine_row(p, q), warp, kWarps, lane, acc);
#pragma unroll
  for (int c = 0; c < 4; ++c) part_o[warp][lane + 32 * c] = acc[c];
  if (lane == 0) part_l[warp] = L;
  __syncthreads();
  if (threadIdx.x >= kLora / 4) return;
  float Lsum = 0.0f;
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    Lsum += part_l[w];
    const float4 v = part_o[w][threadIdx.x];
    o.x += v.x;
    o.y += v.y;
    o.z += v.z;
    o.w += v.w;
  }
  const float inv = Lsum > 0.0f ? 1.0f / Lsum : 0.0f;
  uint2 v;
  v.x = pack_bf16(o.x * inv, o.y * inv);
  v.y = pack_bf16(o.z * inv, o.w * inv);
  *reinterpret_cast<uint2*>(p.lat + int64_t(q) * kLora + threadIdx.x * 4) = v;
}

// Many rows (large batches, few splits each): one warp per row, eight rows per block.
__global__ void __launch_bounds__(kWarps * 32) decode_combine_narrow_kernel(const CombineParams p) {
  pdl_prologue();
  const int lane = threadIdx.x & 31;
  const int q = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (q >= p.n_rows) return;
  float4 acc[4];
  const float L = accumulate_splits(p, combine_row(p, q), 0, 1, lane, acc);
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  bf16* dst = p.lat + int64_t(q) * kLora;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    uint2 v;
    v.x = pack_bf16(acc[c].x * inv, acc[c].y * inv);
    v.y = pack_bf16(acc[c].z * inv, acc[c].w * inv);
    *reinterpret_cast<uint2*>(dst + (lane + 32 * c) * 4) = v;
  }
}

}  // namespace

Status launch_decode_combine(const CombineParams& p, cudaStream_t stream) {
  if (p.n_rows == 0) return {};
  // A block per row where rows are few (small batches: many splits each, and the GPU would be idle with a
  // warp per row); a warp per row otherwise (there a block per row left 7 of 8 warps idle: +8% at batch 64).
  if (p.n_rows < kWideRowsBelow)
    return launch("mla_decode_combine", {dim3(unsigned(p.n_rows)), dim3(kWarps * 32)}, stream,
                  decode_combine_wide_kernel, p);
  return launch("mla_decode_combine", {dim3(unsigned((p.n_rows + kWarps - 1) / kWarps)), dim3(kWarps * 32)},
                stream, decode_combine_narrow_kernel, p);
}

}  // namespace rill::cuda::mla
