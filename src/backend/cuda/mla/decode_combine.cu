// Split-KV combine: one warp per (decode token, head) merges its sequence's split partials with LSE weights,
// lat = sum_j 2^(m_j - M) o_j / sum_j 2^(m_j - M) l_j, and stores lat in bf16 for the W_UV GEMM.
#include "backend/cuda/common/check.h"
#include "backend/cuda/mla/device.cuh"
#include "backend/cuda/mla/phases.h"

namespace rill::cuda::mla {
namespace {

constexpr int kWarps = 8;

__global__ void __launch_bounds__(kWarps * 32) decode_combine_kernel(const CombineParams p) {
  const int lane = threadIdx.x & 31;
  const int q = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (q >= p.n_rows) return;
  const int H = p.n_heads, d = q / H, h = q % H;
  const int s = p.token_seq[p.plan.dec_tokens[d]];
  const int rows = (p.seq_token_start[s + 1] - p.seq_token_start[s]) * H;
  const int r = (d - p.plan.dec_tok_start[s]) * H + h;
  const int n = p.plan.dec_splits[s];
  const int64_t base = int64_t(p.plan.dec_slot_start[s]) + r;

  float M = -INFINITY;
  for (int j = lane; j < n; j += 32) M = fmaxf(M, p.part_ml[(base + int64_t(j) * rows) * 2]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));

  float4 acc[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) acc[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float L = 0.0f;
  for (int j = 0; j < n; ++j) {
    const int64_t slot = base + int64_t(j) * rows;
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
  decode_combine_kernel<<<(p.n_rows + kWarps - 1) / kWarps, kWarps * 32, 0, stream>>>(p);
  RILL_CUDA_CHECK_LAUNCH("mla_decode_combine");
  return {};
}

}  // namespace rill::cuda::mla
