// kda_prepare in one kernel: conv CTAs (short causal conv K=4 + SiLU over q|k|v, window update) and gate
// CTAs (forget gate g, beta), both over 16-token tiles of the step (grid.y) and 8 channels per thread.
//
// Window race: the tokens of a sequence with position i < K-1 read the slot's old window, and the window is
// rewritten in the same launch. A token t is therefore *owned* by the tile holding its sequence's first
// token when i < K-1, else by the tile holding t; owner(t) is non-decreasing, so a tile owns a contiguous
// token range [f(tile_start), f(tile_end)). The thread that owns a sequence's first token reads the old
// window (K-1 rows of its 8 channels), then writes the new one; nobody else touches those bytes. The windows
// of in-step snapshots (other slots) are written by the tile that owns their last row.
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kda/config.h"
#include "backend/cuda/kda/device.cuh"
#include "backend/cuda/kda/phases.h"

namespace rill::cuda::kda {
namespace {

constexpr int kHist = kConvTaps - 1;  // window rows

// First token whose owner is >= x (x in [0, T]).
__device__ __forceinline__ int owned_begin(const PrepareParams& p, int x) {
  if (x >= p.n_tokens) return p.n_tokens;
  const int s = p.token_seq[x];
  const int t0 = p.seq_token_start[s], i = x - t0;
  if (i > 0 && i < kHist) return min(t0 + kHist, p.seq_token_start[s + 1]);
  return x;
}

// A thread's 16-byte rows of tokens [a, b) of a step-long input (row stride ld), read kAhead tokens ahead of
// their use: the token loops below store each token's outputs before the next token's load, and a load
// issued only then cost one dependent round trip per token (ncu, H100, 8K tokens: 0.41 ms a layer at 25%
// occupancy, 0.7 TB/s). The inputs are never written during the step (__ldg).
struct RowsAhead {
  static constexpr int kAhead = 4;
  const bf16* base;
  int64_t ld;
  int b;
  uint4 r[kAhead];  // tokens t .. t + kAhead - 1 (zeros past b); shifted, never indexed dynamically
  __device__ __forceinline__ RowsAhead(const bf16* base_, int64_t ld_, int a, int b_) : base(base_), ld(ld_), b(b_) {
#pragma unroll
    for (int u = 0; u < kAhead; ++u) r[u] = load(a + u);
  }
  __device__ __forceinline__ uint4 load(int t) const {
    return t < b ? __ldg(reinterpret_cast<const uint4*>(base + int64_t(t) * ld)) : make_uint4(0, 0, 0, 0);
  }
  // Token t's row (t: the tokens in order from a), and the load of token t + kAhead.
  __device__ __forceinline__ uint4 next(int t) {
    const uint4 cur = r[0];
#pragma unroll
    for (int u = 0; u + 1 < kAhead; ++u) r[u] = r[u + 1];
    r[kAhead - 1] = load(t + kAhead);
    return cur;
  }
};

__device__ __forceinline__ float silu_f32(float x) {
  return x / (1.0f + expf(-x));
}

// Prefix caching's in-step snapshots: the window after a request's position is the K-1 pre-conv rows before
// it, inside this step (the position is a chunk boundary past the step's start). The tile that owns the last
// of those rows copies them into the request's slot (16-byte copies: bit-exact, as the step's own window).
__device__ void snapshot_windows(const PrepareParams& p, int a, int b, int ch) {
  const int s_last = p.token_seq[b - 1];
  for (int s = p.token_seq[a]; s <= s_last; ++s) {
    const int t0 = p.seq_token_start[s];
    for (int j = p.snap_begin[s]; j < p.snap_begin[s + 1]; ++j) {
      const int end = t0 + p.snaps[j].pos - p.seq_start_pos[s];  // one past the window's last row
      if (end - 1 < a || end - 1 >= b) continue;
      bf16* win = p.conv_state + int64_t(p.snaps[j].slot) * p.ld_cs_slot + ch;
#pragma unroll
      for (int r = 0; r < kHist; ++r)
        *reinterpret_cast<uint4*>(win + int64_t(r) * p.ld_cs_row) =
            *reinterpret_cast<const uint4*>(p.qkv + int64_t(end - kHist + r) * p.ld_qkv + ch);
    }
  }
}

__device__ void conv_tile(const PrepareParams& p, int tile_start) {
  const int n_ch = 3 * p.proj;
  const int ch = (blockIdx.x * kPrepThreads + threadIdx.x) * kPrepVec;
  if (ch >= n_ch) return;
  const int a = owned_begin(p, tile_start), b = owned_begin(p, min(tile_start + kPrepTile, p.n_tokens));
  if (a >= b) return;

  float w[kPrepVec][kConvTaps];
#pragma unroll
  for (int c = 0; c < kPrepVec; ++c) {
    const float4 t = *reinterpret_cast<const float4*>(p.conv_w + size_t(ch + c) * kConvTaps);
    w[c][0] = t.x, w[c][1] = t.y, w[c][2] = t.z, w[c][3] = t.w;
  }
  const int which = ch / p.proj, cw = ch - which * p.proj;  // q, k or v; channel within it
  bf16* out = which == 0 ? p.q : which == 1 ? p.k : p.v;
  const int64_t ld_out = which == 0 ? p.ld_q : which == 1 ? p.ld_k : p.ld_v;
  const bf16* in = p.qkv + ch;

  float hist[kHist][kPrepVec];  // hist[j] = x_{i-K+1+j}
  int t0 = 0, t_end = -1;
  bf16* rec = nullptr;  // the sequence's conv records (replay records), or null
  RowsAhead ahead(in, p.ld_qkv, a, b);
  for (int t = a; t < b; ++t) {
    const uint4 x_raw = ahead.next(t);
    if (t >= t_end) {  // first token of the range or of a new sequence: rebuild the history
      const int s = p.token_seq[t];
      t0 = p.seq_token_start[s];
      t_end = p.seq_token_start[s + 1];
      const int i = t - t0;  // 0 or >= K-1 by ownership
      const bool window = p.seq_start_pos[s] > 0;
      bf16* win = p.conv_state + int64_t(p.seq_state_slot[s]) * p.ld_cs_slot + ch;
      rec = p.conv_records && p.seq_records[s] ? p.conv_records + int64_t(p.seq_state_slot[s]) * p.ld_cr_slot + ch
                                               : nullptr;
#pragma unroll
      for (int j = 0; j < kHist; ++j) {
        const int pos = i - kHist + j;
        if (pos >= 0) {
          load8(in + int64_t(t0 + pos) * p.ld_qkv, hist[j]);
        } else if (window) {
          load8(win + int64_t(kHist + pos) * p.ld_cs_row, hist[j]);
        } else {
#pragma unroll
          for (int c = 0; c < kPrepVec; ++c) hist[j][c] = 0.0f;
        }
      }
      if (i == 0 && !rec) {  // new window = last K-1 of [old window (hist) | the n new inputs]
        const int n = t_end - t0;
#pragma unroll
        for (int r = 0; r < kHist; ++r) {
          const int src = n + r;
          float row[kPrepVec] = {};
          if (src >= kHist) {
            load8(in + int64_t(t0 + src - kHist) * p.ld_qkv, row);
          } else {
#pragma unroll
            for (int j = 0; j < kHist; ++j) {
              if (j == src) {
#pragma unroll
                for (int c = 0; c < kPrepVec; ++c) row[c] = hist[j][c];
              }
            }
          }
          store8(win + int64_t(r) * p.ld_cs_row, row);  // exact: bf16 values copied
        }
      }
    }
    float x[kPrepVec], y[kPrepVec];
    unpack8(x_raw, x);
    if (rec) store8(rec + int64_t(t - t0) * p.ld_cr_row, x);  // exact: bf16 values copied
#pragma unroll
    for (int c = 0; c < kPrepVec; ++c) {
      // Same order and rounding as the CPU reference: ((w0 x0 + w1 x1) + w2 x2) + w3 x3, no FMA contraction.
      float acc = __fmul_rn(w[c][0], hist[0][c]);
      acc = __fadd_rn(acc, __fmul_rn(w[c][1], hist[1][c]));
      acc = __fadd_rn(acc, __fmul_rn(w[c][2], hist[2][c]));
      acc = __fadd_rn(acc, __fmul_rn(w[c][3], x[c]));
      y[c] = silu_f32(acc);
#pragma unroll
      for (int j = 0; j + 1 < kHist; ++j) hist[j][c] = hist[j + 1][c];
      hist[kHist - 1][c] = x[c];
    }
    store8(out + int64_t(t) * ld_out + cw, y);
  }
  if (p.snaps) snapshot_windows(p, a, b, ch);
}

__device__ void gate_tile(const PrepareParams& p, int tile_start) {
  const int ch = ((blockIdx.x - p.conv_blocks) * kPrepThreads + threadIdx.x) * kPrepVec;
  if (ch >= p.proj) return;
  const int h = ch / kHeadDim;
  const float decay = expf(p.a_log[h]);
  float bias[kPrepVec];
  {
    const float4 b0 = *reinterpret_cast<const float4*>(p.dt_bias + ch);
    const float4 b1 = *reinterpret_cast<const float4*>(p.dt_bias + ch + 4);
    bias[0] = b0.x, bias[1] = b0.y, bias[2] = b0.z, bias[3] = b0.w;
    bias[4] = b1.x, bias[5] = b1.y, bias[6] = b1.z, bias[7] = b1.w;
  }
  const int t_end = min(tile_start + kPrepTile, p.n_tokens);
  RowsAhead ahead(p.graw + ch, p.ld_graw, tile_start, t_end);
  for (int t = tile_start; t < t_end; ++t) {
    float x[kPrepVec], g[kPrepVec];
    unpack8(ahead.next(t), x);
#pragma unroll
    for (int c = 0; c < kPrepVec; ++c) {
      const float z = x[c] + bias[c];
      if (p.bounded_gate) {
        g[c] = p.lower_bound * (1.0f / (1.0f + expf(-(decay * z))));  // K3: LB * sigmoid(exp(A_log) z)
      } else {
        const float sp = z > 20.0f ? z : log1pf(expf(z));  // softplus, linear above 20
        g[c] = -decay * sp;
      }
    }
    float* gp = p.g + int64_t(t) * p.ld_g + ch;
    *reinterpret_cast<float4*>(gp) = make_float4(g[0], g[1], g[2], g[3]);
    *reinterpret_cast<float4*>(gp + 4) = make_float4(g[4], g[5], g[6], g[7]);
    if (ch % kHeadDim == 0) {
      const float br = __bfloat162float(p.braw[int64_t(t) * p.ld_braw + h]);
      p.beta[int64_t(t) * p.ld_beta + h] = 1.0f / (1.0f + expf(-br));
    }
  }
}

__global__ void __launch_bounds__(kPrepThreads) kda_prepare_kernel(const PrepareParams p) {
  pdl_prologue();
  const int tile_start = int(blockIdx.y) * kPrepTile;
  if (int(blockIdx.x) < p.conv_blocks)
    conv_tile(p, tile_start);
  else
    gate_tile(p, tile_start);
}

}  // namespace

Status launch_prepare(const PrepareParams& p, cudaStream_t stream) {
  if (p.n_tokens == 0) return {};
  const int per_block = kPrepThreads * kPrepVec;
  const int gate_blocks = (p.proj + per_block - 1) / per_block;
  const dim3 grid(unsigned(p.conv_blocks + gate_blocks), unsigned((p.n_tokens + kPrepTile - 1) / kPrepTile));
  if (grid.y > 65535u)
    return invalid_argument("kda_prepare (CUDA): {} tokens exceed the launch grid", p.n_tokens);
  return launch("kda_prepare", {grid, dim3(kPrepThreads)}, stream, kda_prepare_kernel, p);
}

}  // namespace rill::cuda::kda
