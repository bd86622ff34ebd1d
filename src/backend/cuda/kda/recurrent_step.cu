// Fused recurrent step (decode, n_new == 1; and up to kRecurrentMaxTokens tokens
// one after another, the state kept in registers), spec §3.3 step 6 (recurrent_math.cuh), one CTA per
// (sequence, head, block of VB state columns). 256 threads: thread (row group, column group) keeps R rows x 4
// columns (float4s, a warp covers whole 128-byte row segments) in registers. Warp 0 L2-normalises q and k and
// forms the gates of each token.
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kda/config.h"
#include "backend/cuda/kda/device.cuh"
#include "backend/cuda/kda/phases.h"
#include "backend/cuda/kda/recurrent_math.cuh"

namespace rill::cuda::kda {
namespace {

// 4 consecutive bf16 of a row widened to fp32.
__device__ __forceinline__ void load4(const bf16* p, float (&x)[4]) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
  x[0] = a.x, x[1] = a.y, x[2] = b.x, x[3] = b.y;
}

template <int VB>
__global__ void __launch_bounds__(kStepThreads, VB >= 64 ? 3 : 4) kda_step_kernel(const AttentionIo io) {
  pdl_prologue();
  constexpr int kNcg = VB / 4;               // float4 column groups
  constexpr int kNrg = kStepThreads / kNcg;  // row groups
  constexpr int kR = kHeadDim / kNrg;        // state rows per thread
  constexpr int kNvb = kHeadDim / VB;
  __shared__ StepGates sg;
  __shared__ float4 red_a[kNrg][kNcg], red_b[kNrg][kNcg];

  const int vb = int(blockIdx.x) % kNvb, sh = int(blockIdx.x) / kNvb;
  const int h = sh % io.n_heads, s = sh / io.n_heads;
  const int t0 = io.seq_token_start[s], n = io.seq_token_start[s + 1] - t0;
  if (n < 1 || n > io.recurrent_max) return;  // longer sequences take the chunked path
  const bool rec = io.records != nullptr && io.seq_records[s] != 0;  // replay records: kda.cc sets recurrent_max
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

  for (int j = 0; j < n; ++j) {  // one token after another: the state stays in registers
    const int t = t0 + j;
    if (tid < 32) {  // lane owns channels 4 lane .. 4 lane + 3
      const int c0 = tid * 4;
      float q[4], k[4], g[4];
      load4(io.q + int64_t(t) * io.ld_q + h * kHeadDim + c0, q);
      load4(io.k + int64_t(t) * io.ld_k + h * kHeadDim + c0, k);
      const float4 g4 = *reinterpret_cast<const float4*>(io.g + int64_t(t) * io.ld_g + h * kHeadDim + c0);
      g[0] = g4.x, g[1] = g4.y, g[2] = g4.z, g[3] = g4.w;
      step_gates(q, k, g, io.beta[int64_t(t) * io.ld_beta + h], tid, sg);
    }
    __syncthreads();
    float* rec_row = rec ? io.records + int64_t(io.seq_state_slot[s]) * io.ld_rec_slot + int64_t(j) * io.ld_rec_token +
                               int64_t(h) * 3 * kHeadDim
                         : nullptr;
    if (rec && vb == 0 && tid < 32) {  // beta k̂ and alpha as step_update forms them, from shared memory
      const int c0 = tid * 4;
      float4 bk, al;
      bk.x = sg.beta * sg.kh[c0], bk.y = sg.beta * sg.kh[c0 + 1], bk.z = sg.beta * sg.kh[c0 + 2],
      bk.w = sg.beta * sg.kh[c0 + 3];
      al = make_float4(sg.alpha[c0], sg.alpha[c0 + 1], sg.alpha[c0 + 2], sg.alpha[c0 + 3]);
      *reinterpret_cast<float4*>(rec_row + c0) = bk;
      *reinterpret_cast<float4*>(rec_row + kHeadDim + c0) = al;
    }
    float v[4];
    load4(io.v + int64_t(t) * io.ld_v + h * kHeadDim + col, v);
    float4 e;
    const float4 o = step_update<kR, kNrg, kNcg>(st, sg, red_a, red_b, rg, cg, row0,
                                                 make_float4(v[0], v[1], v[2], v[3]), rec ? &e : nullptr);
    if (rec && rg == 0) *reinterpret_cast<float4*>(rec_row + 2 * kHeadDim + col) = e;
    if (rg == 0) {
      uint2 u;
      u.x = pack_bf16x2(o.x, o.y);
      u.y = pack_bf16x2(o.z, o.w);
      *reinterpret_cast<uint2*>(io.out + int64_t(t) * io.ld_out + h * kHeadDim + col) = u;
    }
    if (j + 1 < n) __syncthreads();  // the next token's gates and sums overwrite what this one read
  }
  if (rec) return;  // the slot keeps the state from before the step; kda_fold commits the accepted tokens
#pragma unroll
  for (int r = 0; r < kR; ++r) __stcs(reinterpret_cast<float4*>(S + (row0 + r) * kHeadDim + col), st[r]);
}

}  // namespace

Status launch_recurrent_step(const AttentionIo& io, int n_recurrent, const CudaContext& cx) {
  if (n_recurrent == 0 || io.n_seqs == 0) return {};
  // Many heads: 64-column CTAs (32 KB of state each, 3-4 resident per SM); few: 32 columns for more CTAs.
  const bool wide = int64_t(n_recurrent) * io.n_heads >= 4 * int64_t(cx.sm_count);
  const int64_t per_head = wide ? kHeadDim / 64 : kHeadDim / 32;
  const int64_t blocks = int64_t(io.n_seqs) * io.n_heads * per_head;
  if (blocks > 0x7fffffff)
    return invalid_argument("kda_attention (CUDA): {} decode CTAs exceed the grid", blocks);
  const LaunchShape shape{dim3(unsigned(blocks)), dim3(kStepThreads)};
  return launch("kda_step", shape, cx.stream, wide ? kda_step_kernel<64> : kda_step_kernel<32>, io);
}

}  // namespace rill::cuda::kda
