// The whole KDA decode step of one layer after its input projections, as one kernel (issue #16): one CTA per
// (sequence, head) does what four launches did — the low-rank second halves of the forget gate and output
// gate (graw = f_b fa, gate = g_b ga, this head's 128 rows each), the short conv + SiLU of this head's q|k|v
// channels with the window update, the gates, the recurrent step (recurrent_step.cu's algebra with all 128
// state columns in one CTA) and the gated RMSNorm of the head's output.
//
// Why one CTA per head holds every column: the conv window of the head's q and k channels is read by every
// column block, and only a single owner can rewrite it in the same launch without a race. At batch 1 that is
// 32 CTAs for Kimi-Linear (each streams 64 KiB of state in and out plus 64 KiB of f_b/g_b rows), which lost
// to the separate ops there (2.95 against 2.88 ms a graphed step of the FP8 48B on the H100). So steps whose
// heads fill at most a quarter of the SMs (Kimi-Linear's batch 1) take the split form: a cluster of 4 CTAs
// per head, each 32 state columns (the head's q and k convolved by each, its own v channels; the f_b rows of
// the decay and the g_b rows of its gate columns split among the four and the decays shared through
// distributed shared memory; rank 0 alone rewrites the q and k window rows, after a cluster barrier past
// every rank's reads; the output norm's 32 lane sums gathered into each CTA so its sum is the one-CTA form's,
// bit for bit): 2.66 against 2.73 ms a step on the H100, where the separate ops had won (docs/PERF.md).
//
// The model's decode path since it passed the op, model and runner GPU tests on the H200 and measured faster
// there (docs/PERF.md); the backend option kda_fused_decode=0 runs the separate ops instead.
//
// Numerics are the separate ops' rounding points: graw, gate, q, k, v and o rounded to bf16 where those ops
// store bf16, everything else fp32; only graw's and gate's sums run in another order than the GEMV's.
//
// PDL: the state and the conv window of this layer are written only by earlier steps, and the weights never,
// so they are loaded before pdl_wait(); the step's activations (qkv, fa, ga, braw) after it.
#include <cooperative_groups.h>

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

namespace cg = cooperative_groups;

constexpr int kThreads = kStepThreads;  // 256
constexpr int kHist = kConvTaps - 1;    // conv window rows
constexpr int kClusterSplit = 4;        // the split form's CTAs a head (kHeadDim / 4 = 32 state columns each)

__device__ __forceinline__ float silu_f32(float x) {
  return x / (1.0f + expf(-x));
}

__device__ __forceinline__ float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

// Row `row` of a [*, 128] bf16 matrix times x (128 floats in shared memory), summed over the warp.
__device__ __forceinline__ float warp_row_dot(const bf16* w, int64_t ld, int row, const float* x, int lane) {
  const uint2 u = *reinterpret_cast<const uint2*>(w + int64_t(row) * ld + lane * 4);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
  const float* xs = x + lane * 4;
  return warp_sum(a.x * xs[0] + a.y * xs[1] + b.x * xs[2] + b.y * xs[3]);
}

// Every CTA of the cluster (kSplit > 1; its barrier also orders this CTA's threads), else this CTA's threads.
template <int kSplit>
__device__ __forceinline__ void sync_group() {
  if constexpr (kSplit > 1)
    cg::this_cluster().sync();
  else
    __syncthreads();
}

// Stores v at element i of `array` (shared memory) in every CTA of the cluster (kSplit > 1), else here.
template <int kSplit>
__device__ __forceinline__ void store_everywhere(float* array, int i, float v) {
  if constexpr (kSplit > 1) {
    cg::cluster_group cluster = cg::this_cluster();
#pragma unroll
    for (int q = 0; q < kSplit; ++q) cluster.map_shared_rank(array, unsigned(q))[i] = v;
  } else {
    array[i] = v;
  }
}

// The step of head `sh % n_heads` of sequence `sh / n_heads`, state columns [rank kVB, (rank + 1) kVB)
// (kSplit CTAs a head, this one `rank`): the whole head in one CTA (kSplit 1) or a quarter of it in each CTA
// of a cluster of kClusterSplit.
template <bool kLowRankGate, int kSplit>
__device__ __forceinline__ void decode_step(const DecodeParams& p, int sh, int rank) {
  constexpr int kVB = kHeadDim / kSplit;  // this CTA's state columns
  constexpr int kNcg = kVB / 4;           // float4 column groups
  constexpr int kNrg = kThreads / kNcg;   // row groups
  constexpr int kR = kHeadDim / kNrg;     // state rows per thread
  constexpr int kQkThreads =
      2 * kHeadDim / kPrepVec;  // 32 threads convolve the head's q and k, 8 channels each
  constexpr int kConvThreads = kQkThreads + kVB / kPrepVec;  // and this CTA's v channels
  constexpr int kRowsPerWarp = kVB / (kThreads / 32);        // f_b / g_b rows a warp (this CTA's kVB of them)
  static_assert(kR * kNrg == kHeadDim && kNcg <= 32 && kRowsPerWarp >= 1 && kHeadDim / 4 == 32,
                "row groups cover the head; the first row group is in warp 0; 32 lane sums in the norm");
  static_assert(kConvThreads + kHeadDim / kPrepVec < kThreads, "conv, low-rank input and beta threads apart");
  __shared__ float conv_s[3][kHeadDim];  // q, k, v after conv + SiLU (bf16 values; v: this CTA's columns)
  __shared__ float fa_s[kHeadDim], ga_s[kHeadDim], gate_s[kHeadDim], g_s[kHeadDim];
  __shared__ StepGates sg;
  __shared__ float4 red_a[kNrg][kNcg], red_b[kNrg][kNcg];
  __shared__ float beta_s;
  __shared__ float lane_ss[32];  // the output norm's sums of squares of 4 columns each (kSplit > 1)

  const int h = sh % p.n_heads, s = sh / p.n_heads;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int cg = tid % kNcg, rg = tid / kNcg, c_lo = rank * kVB, col = c_lo + cg * 4, row0 = rg * kR;
  const int P = p.n_heads * kHeadDim;

  // --- before the wait: this layer's cache (earlier steps wrote it) and weights ---
  const int t = p.seq_token_start[s];
  const int slot = p.seq_state_slot[s];
  const bool carried = p.seq_start_pos[s] > 0;  // a fresh sequence starts from zero state and window
  float* S = p.state + int64_t(slot) * p.ld_state_slot + int64_t(h) * p.ld_state_head;
  float4 st[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r)
    st[r] = carried ? __ldcs(reinterpret_cast<const float4*>(S + (row0 + r) * kHeadDim + col))
                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);

  // Conv threads: channels [8 i, 8 i + 8) of the head's q (i < 16) or k (i < 32), or of this CTA's v columns;
  // their window rows.
  const int which = tid < kQkThreads ? tid / (kHeadDim / kPrepVec) : 2;
  const int within =
      tid < kQkThreads ? (tid % (kHeadDim / kPrepVec)) * kPrepVec : c_lo + (tid - kQkThreads) * kPrepVec;
  const int ch = which * P + h * kHeadDim + within;
  const bool rewrites_window = which == 2 || rank == 0;  // q and k's rows: rank 0 (every rank reads them)
  float hist[kHist][kPrepVec];
  bf16* win = p.conv_state + int64_t(slot) * p.ld_cs_slot + ch;
  if (tid < kConvThreads) {
    // The taps are read after the wait (registers are taken by the state); ask L2 for them now.
    const char* taps = reinterpret_cast<const char*>(p.conv_w + size_t(ch) * kConvTaps);
    asm volatile("prefetch.global.L2 [%0];" ::"l"(taps));
#pragma unroll
    for (int j = 0; j < kHist; ++j) {
      if (carried) {
        load8(win + int64_t(j) * p.ld_cs_row, hist[j]);
      } else {
#pragma unroll
        for (int c = 0; c < kPrepVec; ++c) hist[j][c] = 0.0f;
      }
    }
  }
  // This CTA's f_b (and g_b) rows: 32 KiB each a head, asked of L2 now so the dot products below find them
  // there.
  {
    const int64_t bytes = int64_t(kVB) * p.ld_f_b * 2;
    const char* fb = reinterpret_cast<const char*>(p.f_b + (int64_t(h) * kHeadDim + c_lo) * p.ld_f_b);
    for (int64_t off = int64_t(tid) * 128; off < bytes; off += int64_t(kThreads) * 128)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(fb + off));
    if constexpr (kLowRankGate) {
      const char* gb = reinterpret_cast<const char*>(p.g_b + (int64_t(h) * kHeadDim + c_lo) * p.ld_g_b);
      for (int64_t off = int64_t(tid) * 128; off < bytes; off += int64_t(kThreads) * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(gb + off));
    }
  }

  pdl_wait();
  pdl_launch_dependents();

  // --- conv + SiLU; the low-rank inputs and beta ---
  float x[kPrepVec];  // conv threads: this token's pre-conv inputs (the window's new last row)
  if (tid < kConvThreads) {
    load8(p.qkv + int64_t(t) * p.ld_qkv + ch, x);
#pragma unroll
    for (int c = 0; c < kPrepVec; ++c) {
      const float4 w4 = *reinterpret_cast<const float4*>(p.conv_w + size_t(ch + c) * kConvTaps);
      const float w[kConvTaps] = {w4.x, w4.y, w4.z, w4.w};
      // kda_prepare's order and rounding: ((w0 x0 + w1 x1) + w2 x2) + w3 x3, no FMA contraction.
      float acc = __fmul_rn(w[0], hist[0][c]);
      acc = __fadd_rn(acc, __fmul_rn(w[1], hist[1][c]));
      acc = __fadd_rn(acc, __fmul_rn(w[2], hist[2][c]));
      acc = __fadd_rn(acc, __fmul_rn(w[3], x[c]));
      conv_s[which][within + c] = round_bf16(silu_f32(acc));
    }
  } else if (tid < kConvThreads + kHeadDim / kPrepVec) {
    const int c = (tid - kConvThreads) * kPrepVec;
    float y[kPrepVec];
    load8(p.fa + int64_t(t) * p.ld_fa + c, y);
#pragma unroll
    for (int i = 0; i < kPrepVec; ++i) fa_s[c + i] = y[i];
    if constexpr (kLowRankGate) {
      load8(p.ga + int64_t(t) * p.ld_ga + c, y);
#pragma unroll
      for (int i = 0; i < kPrepVec; ++i) ga_s[c + i] = y[i];
    } else {
      load8(p.gate + int64_t(t) * p.ld_gate + h * kHeadDim + c, y);
#pragma unroll
      for (int i = 0; i < kPrepVec; ++i) gate_s[c + i] = y[i];
    }
  } else if (tid == kThreads - 1) {
    const float br = __bfloat162float(p.braw[int64_t(t) * p.ld_braw + h]);
    beta_s = 1.0f / (1.0f + expf(-br));
  }
  // Every rank has read the window (kSplit > 1) before rank 0 rewrites q and k's rows; the inputs are in.
  sync_group<kSplit>();
  // New window = the last K-1 inputs: old rows 1..K-2, then this token (bf16 values copied exactly).
  if (tid < kConvThreads && rewrites_window) {
#pragma unroll
    for (int j = 0; j + 1 < kHist; ++j) store8(win + int64_t(j) * p.ld_cs_row, hist[j + 1]);
    store8(win + int64_t(kHist - 1) * p.ld_cs_row, x);
  }

  // --- graw (and the gate) = rows [c_lo, c_lo + kVB) of this head's f_b (g_b) times fa (ga), rounded to bf16
  // like the GEMV; the decays go to every rank (the state's rows), the gates stay (this CTA's columns) ---
  {
    const float decay = expf(p.a_log[h]);
    for (int i = c_lo + warp * kRowsPerWarp; i < c_lo + (warp + 1) * kRowsPerWarp; ++i) {
      const float graw = round_bf16(warp_row_dot(p.f_b, p.ld_f_b, h * kHeadDim + i, fa_s, lane));
      float gate = 0.0f;
      if constexpr (kLowRankGate)
        gate = round_bf16(warp_row_dot(p.g_b, p.ld_g_b, h * kHeadDim + i, ga_s, lane));
      if (lane == 0) {
        const float z = graw + p.dt_bias[h * kHeadDim + i];
        float g;
        if (p.bounded_gate) {
          g = p.lower_bound * (1.0f / (1.0f + expf(-(decay * z))));  // K3: LB * sigmoid(exp(A_log) z)
        } else {
          const float sp = z > 20.0f ? z : log1pf(expf(z));  // softplus, linear above 20
          g = -decay * sp;
        }
        store_everywhere<kSplit>(g_s, i, g);
        if constexpr (kLowRankGate) gate_s[i] = gate;
      }
    }
  }
  sync_group<kSplit>();

  // --- L2-normalised q and k, the decays (warp 0; lane owns channels 4 lane .. 4 lane + 3) ---
  if (warp == 0) {
    const int c0 = lane * 4;
    const float q[4] = {conv_s[0][c0], conv_s[0][c0 + 1], conv_s[0][c0 + 2], conv_s[0][c0 + 3]};
    const float k[4] = {conv_s[1][c0], conv_s[1][c0 + 1], conv_s[1][c0 + 2], conv_s[1][c0 + 3]};
    const float g[4] = {g_s[c0], g_s[c0 + 1], g_s[c0 + 2], g_s[c0 + 3]};
    step_gates(q, k, g, beta_s, lane, sg);
  }
  __syncthreads();

  // --- the recurrent step (recurrent_math.cuh), this CTA's columns ---
  const float4 v = make_float4(conv_s[2][col], conv_s[2][col + 1], conv_s[2][col + 2], conv_s[2][col + 3]);
  const float4 o4 = step_update<kR, kNrg, kNcg>(st, sg, red_a, red_b, rg, cg, row0, v);
#pragma unroll
  for (int r = 0; r < kR; ++r) __stcs(reinterpret_cast<float4*>(S + (row0 + r) * kHeadDim + col), st[r]);

  // --- gated RMSNorm of the head's output (kda_output_norm's arithmetic: the row group 0 threads hold the
  // columns, 4 each; the sum of squares is warp 0's warp_sum over the 32 lanes' sums of 4 columns, gathered
  // from every rank first when the head is split) ---
  float o[4] = {0.0f, 0.0f, 0.0f, 0.0f}, ss = 0.0f;
  if (rg == 0) {
    o[0] = round_bf16(o4.x), o[1] = round_bf16(o4.y), o[2] = round_bf16(o4.z), o[3] = round_bf16(o4.w);
#pragma unroll
    for (int i = 0; i < 4; ++i) ss += o[i] * o[i];
    if constexpr (kSplit > 1) store_everywhere<kSplit>(lane_ss, col / 4, ss);
  }
  if constexpr (kSplit > 1) sync_group<kSplit>();
  if (warp == 0) {
    if constexpr (kSplit > 1) ss = lane_ss[lane];
    ss = warp_sum(ss);
    const float r = rsqrtf(ss / float(kHeadDim) + p.eps);
    if (rg == 0) {
      float y[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        y[i] = (o[i] * r) * p.o_norm[col + i] * (1.0f / (1.0f + expf(-gate_s[col + i])));
      store_bf16<4>(p.out + int64_t(t) * p.ld_out + h * kHeadDim + col, y);
    }
  }
}

template <bool kLowRankGate>
__global__ void __launch_bounds__(kThreads, 2) kda_decode_kernel(const DecodeParams p) {
  decode_step<kLowRankGate, 1>(p, int(blockIdx.x), 0);
}

template <bool kLowRankGate>
__global__ void __cluster_dims__(kClusterSplit, 1, 1) __launch_bounds__(kThreads, 2)
    kda_decode_split_kernel(const DecodeParams p) {
  decode_step<kLowRankGate, kClusterSplit>(p, int(blockIdx.x) / kClusterSplit,
                                           int(blockIdx.x) % kClusterSplit);
}

}  // namespace

bool decode_fused_splits(int n_seqs, int n_heads, int sm_count) {
  return int64_t(n_seqs) * n_heads * kClusterSplit <= sm_count;
}

Status launch_decode_fused(const DecodeParams& p, int n_seqs, const CudaContext& cx) {
  if (n_seqs == 0) return {};
  const bool split = decode_fused_splits(n_seqs, p.n_heads, cx.sm_count);
  const int64_t blocks = int64_t(n_seqs) * p.n_heads * (split ? kClusterSplit : 1);
  if (blocks > 0x7fffffff) return invalid_argument("kda_decode (CUDA): {} CTAs exceed the grid", blocks);
  const LaunchShape shape{dim3(unsigned(blocks)), dim3(kThreads)};
  if (split) {
    if (p.g_b) return launch("kda_decode_split", shape, cx.stream, kda_decode_split_kernel<true>, p);
    return launch("kda_decode_split", shape, cx.stream, kda_decode_split_kernel<false>, p);
  }
  if (p.g_b) return launch("kda_decode", shape, cx.stream, kda_decode_kernel<true>, p);
  return launch("kda_decode", shape, cx.stream, kda_decode_kernel<false>, p);
}

}  // namespace rill::cuda::kda
