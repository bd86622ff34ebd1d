// Fused recurrent step (decode, n_new == 1), spec §3.3 step 6 for one token, one CTA per (sequence, head,
// block of VB state columns). Per column j of S ([d_k][d_v], fp32):
//   a_j = sum_c (alpha_c k̂_c) S[c][j],  b_j = sum_c (alpha_c q̂_c) S[c][j],  e_j = v_j - a_j,
//   S'[c][j] = alpha_c S[c][j] + beta k̂_c e_j,  o_j = sum_c q̂_c S'[c][j] = b_j + beta (q̂.k̂) e_j,
// so every state element is read once and written once. 256 threads: thread (row group, column group)
// keeps R rows x 4 columns (float4s, a warp covers whole 128-byte row segments) in registers; the two column
// sums cross row groups through shared memory. Warp 0 meanwhile L2-normalises q and k and forms the gates.
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kda/config.h"
#include "backend/cuda/kda/device.cuh"
#include "backend/cuda/kda/phases.h"

namespace rill::cuda::kda {
namespace {

__device__ __forceinline__ float4 fma4(float s, float4 x, float4 acc) {
  return make_float4(fmaf(s, x.x, acc.x), fmaf(s, x.y, acc.y), fmaf(s, x.z, acc.z), fmaf(s, x.w, acc.w));
}

template <int VB>
__global__ void __launch_bounds__(kStepThreads, VB >= 64 ? 3 : 4) kda_step_kernel(const AttentionIo io) {
  pdl_prologue();
  constexpr int kNcg = VB / 4;               // float4 column groups
  constexpr int kNrg = kStepThreads / kNcg;  // row groups
  constexpr int kR = kHeadDim / kNrg;        // state rows per thread
  constexpr int kNvb = kHeadDim / VB;
  __shared__ float alpha_s[kHeadDim], ka_s[kHeadDim], qa_s[kHeadDim], kh_s[kHeadDim];
  __shared__ float4 red_a[kNrg][kNcg], red_b[kNrg][kNcg];
  __shared__ float qk_s, beta_s;

  const int vb = int(blockIdx.x) % kNvb, sh = int(blockIdx.x) / kNvb;
  const int h = sh % io.n_heads, s = sh / io.n_heads;
  const int t = io.seq_token_start[s];
  if (io.seq_token_start[s + 1] - t != 1) return;  // prefill sequences take the chunked path
  const int tid = int(threadIdx.x), cg = tid % kNcg, rg = tid / kNcg;
  const int col = vb * VB + cg * 4, row0 = rg * kR;
  float* S = io.state + int64_t(io.seq_state_slot[s]) * io.ld_state_slot + int64_t(h) * io.ld_state_head;

  float4 st[kR];
  if (io.seq_start_pos[s] > 0) {
#pragma unroll
    for (int r = 0; r < kR; ++r)
      st[r] = __ldcs(reinterpret_cast<const float4*>(S + (row0 + r) * kHeadDim + col));
  } else {  // a fresh sequence starts from S = 0 whatever the slot holds
#pragma unroll
    for (int r = 0; r < kR; ++r) st[r] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }

  if (tid < 32) {  // lane owns channels 4 lane .. 4 lane + 3
    const int c0 = tid * 4;
    float q[4], k[4], g[4];
    {
      const uint2 qu = *reinterpret_cast<const uint2*>(io.q + int64_t(t) * io.ld_q + h * kHeadDim + c0);
      const uint2 ku = *reinterpret_cast<const uint2*>(io.k + int64_t(t) * io.ld_k + h * kHeadDim + c0);
      const float2 q01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&qu.x));
      const float2 q23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&qu.y));
      const float2 k01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&ku.x));
      const float2 k23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&ku.y));
      q[0] = q01.x, q[1] = q01.y, q[2] = q23.x, q[3] = q23.y;
      k[0] = k01.x, k[1] = k01.y, k[2] = k23.x, k[3] = k23.y;
      const float4 g4 = *reinterpret_cast<const float4*>(io.g + int64_t(t) * io.ld_g + h * kHeadDim + c0);
      g[0] = g4.x, g[1] = g4.y, g[2] = g4.z, g[3] = g4.w;
    }
    float qq = 0.0f, kk = 0.0f;
#pragma unroll
    for (int c = 0; c < 4; ++c) qq += q[c] * q[c], kk += k[c] * k[c];
    qq = warp_sum(qq);
    kk = warp_sum(kk);
    const float qn = 1.0f / sqrtf(qq + 1e-6f), kn = 1.0f / sqrtf(kk + 1e-6f);
    const float scale = 1.0f / sqrtf(float(kHeadDim));
    float qk = 0.0f;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const float qh = q[c] * qn * scale, kh = k[c] * kn, a = expf(g[c]);
      alpha_s[c0 + c] = a;
      ka_s[c0 + c] = kh * a;
      qa_s[c0 + c] = qh * a;
      kh_s[c0 + c] = kh;
      qk += qh * kh;
    }
    qk = warp_sum(qk);
    if (tid == 0) {
      qk_s = qk;
      beta_s = io.beta[int64_t(t) * io.ld_beta + h];
    }
  }
  __syncthreads();

  float4 pa = make_float4(0.0f, 0.0f, 0.0f, 0.0f), pb = pa;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    pa = fma4(ka_s[row0 + r], st[r], pa);
    pb = fma4(qa_s[row0 + r], st[r], pb);
  }
  red_a[rg][cg] = pa;
  red_b[rg][cg] = pb;
  __syncthreads();
  float4 A = make_float4(0.0f, 0.0f, 0.0f, 0.0f), B = A;
#pragma unroll
  for (int j = 0; j < kNrg; ++j) {
    const float4 x = red_a[j][cg], y = red_b[j][cg];
    A.x += x.x, A.y += x.y, A.z += x.z, A.w += x.w;
    B.x += y.x, B.y += y.y, B.z += y.z, B.w += y.w;
  }
  const uint2 vu = *reinterpret_cast<const uint2*>(io.v + int64_t(t) * io.ld_v + h * kHeadDim + col);
  const float2 v01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&vu.x));
  const float2 v23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&vu.y));
  const float beta = beta_s, bqk = beta_s * qk_s;
  const float4 e = make_float4(v01.x - A.x, v01.y - A.y, v23.x - A.z, v23.y - A.w);
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const float a = alpha_s[row0 + r], bk = beta * kh_s[row0 + r];
    const float4 x = st[r];
    const float4 y = make_float4(fmaf(a, x.x, bk * e.x), fmaf(a, x.y, bk * e.y), fmaf(a, x.z, bk * e.z),
                                 fmaf(a, x.w, bk * e.w));
    __stcs(reinterpret_cast<float4*>(S + (row0 + r) * kHeadDim + col), y);
  }
  if (rg == 0) {
    uint2 o;
    o.x = pack_bf16x2(fmaf(bqk, e.x, B.x), fmaf(bqk, e.y, B.y));
    o.y = pack_bf16x2(fmaf(bqk, e.z, B.z), fmaf(bqk, e.w, B.w));
    *reinterpret_cast<uint2*>(io.out + int64_t(t) * io.ld_out + h * kHeadDim + col) = o;
  }
}

}  // namespace

Status launch_recurrent_step(const AttentionIo& io, int n_decode, const CudaContext& cx) {
  if (n_decode == 0 || io.n_seqs == 0) return {};
  // Many heads: 64-column CTAs (32 KB of state each, 3-4 resident per SM); few: 32 columns for more CTAs.
  const bool wide = int64_t(n_decode) * io.n_heads >= 4 * int64_t(cx.sm_count);
  const int64_t per_head = wide ? kHeadDim / 64 : kHeadDim / 32;
  const int64_t blocks = int64_t(io.n_seqs) * io.n_heads * per_head;
  if (blocks > 0x7fffffff)
    return invalid_argument("kda_attention (CUDA): {} decode CTAs exceed the grid", blocks);
  const LaunchShape shape{dim3(unsigned(blocks)), dim3(kStepThreads)};
  return launch("kda_step", shape, cx.stream, wide ? kda_step_kernel<64> : kda_step_kernel<32>, io);
}

}  // namespace rill::cuda::kda
