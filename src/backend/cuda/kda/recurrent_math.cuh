// One token's recurrent step (spec §3.3 step 6), shared by recurrent_step.cu and decode_fused.cu. Per column
// j of the head's state S ([d_k][d_v], fp32):
//   a_j = sum_c (alpha_c k̂_c) S[c][j],  b_j = sum_c (alpha_c q̂_c) S[c][j],  e_j = v_j - a_j,
//   S'[c][j] = alpha_c S[c][j] + beta k̂_c e_j,  o_j = sum_c q̂_c S'[c][j] = b_j + beta (q̂.k̂) e_j,
// so every state element is read once and written once. A CTA's threads each keep kR rows x 4 columns
// (float4s) of S in registers; the two column sums cross the row groups through shared memory.
#pragma once

#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/kda/config.h"

namespace rill::cuda::kda {

// What step_gates leaves for the whole CTA.
struct StepGates {
  float alpha[kHeadDim], ka[kHeadDim], qa[kHeadDim], kh[kHeadDim];  // exp(g), alpha k̂, alpha q̂, k̂
  float qk, beta;                                                   // q̂.k̂, beta
};

__device__ __forceinline__ float4 fma4(float s, float4 x, float4 acc) {
  return make_float4(fmaf(s, x.x, acc.x), fmaf(s, x.y, acc.y), fmaf(s, x.z, acc.z), fmaf(s, x.w, acc.w));
}

// One warp, lane owning channels 4 lane .. 4 lane + 3 of q, k (conv outputs) and the log-decay g:
// L2-normalises q and k (eps 1e-6 on the sum of squares), scales q by d^-1/2 and stores the decays and
// products. Lane 0 writes q̂.k̂ and `beta`.
__device__ __forceinline__ void step_gates(const float (&q)[4], const float (&k)[4], const float (&g)[4],
                                           float beta, int lane, StepGates& sg) {
  const int c0 = lane * 4;
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
    sg.alpha[c0 + c] = a;
    sg.ka[c0 + c] = kh * a;
    sg.qa[c0 + c] = qh * a;
    sg.kh[c0 + c] = kh;
    qk += qh * kh;
  }
  qk = warp_sum(qk);
  if (lane == 0) {
    sg.qk = qk;
    sg.beta = beta;
  }
}

// Every thread of the CTA, once step_gates is visible to all: the update of the thread's rows [row0, row0 +
// kR) and columns of row group rg / column group cg (st updated in place), with v its 4 columns of the
// token's value. One __syncthreads inside (the column sums). Returns o for those 4 columns (in every row
// group). `e_out`, when given, receives the delta-rule correction e = v - (alpha S)^T k_hat of those columns
// (what a speculative verify's replay records keep; bench/kernels/kda_rollback_bench.cu).
template <int kR, int kNrg, int kNcg>
__device__ __forceinline__ float4 step_update(float4 (&st)[kR], const StepGates& sg,
                                              float4 (&red_a)[kNrg][kNcg], float4 (&red_b)[kNrg][kNcg],
                                              int rg, int cg, int row0, float4 v, float4* e_out = nullptr) {
  float4 pa = make_float4(0.0f, 0.0f, 0.0f, 0.0f), pb = pa;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    pa = fma4(sg.ka[row0 + r], st[r], pa);
    pb = fma4(sg.qa[row0 + r], st[r], pb);
  }
  red_a[rg][cg] = pa;
  red_b[rg][cg] = pb;
  __syncthreads();
  float4 A = make_float4(0.0f, 0.0f, 0.0f, 0.0f), B = A;
#pragma unroll
  for (int i = 0; i < kNrg; ++i) {
    const float4 x = red_a[i][cg], y = red_b[i][cg];
    A.x += x.x, A.y += x.y, A.z += x.z, A.w += x.w;
    B.x += y.x, B.y += y.y, B.z += y.z, B.w += y.w;
  }
  const float beta = sg.beta, bqk = sg.beta * sg.qk;
  const float4 e = make_float4(v.x - A.x, v.y - A.y, v.z - A.z, v.w - A.w);
  if (e_out != nullptr) *e_out = e;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const float a = sg.alpha[row0 + r], bk = beta * sg.kh[row0 + r];
    const float4 x = st[r];
    st[r] = make_float4(fmaf(a, x.x, bk * e.x), fmaf(a, x.y, bk * e.y), fmaf(a, x.z, bk * e.z),
                        fmaf(a, x.w, bk * e.w));
  }
  return make_float4(fmaf(bqk, e.x, B.x), fmaf(bqk, e.y, B.y), fmaf(bqk, e.z, B.z), fmaf(bqk, e.w, B.w));
}

}  // namespace rill::cuda::kda
