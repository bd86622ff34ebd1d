// Intra-chunk phase of the chunked gated delta rule (spec §3.3, chunked form), one CTA per (chunk, head),
// token-parallel: nothing here depends on the state. With Γ the in-chunk cumulative log-decay (log2 units):
//   Qg = q̂ ⊙ 2^Γ,  Kd = k̂ ⊙ 2^(Γ_last - Γ),  gamma = 2^Γ_last,
//   L[i,j] = β_i Σ_c k̂_i k̂_j 2^(Γ_i - Γ_j)  (j < i),   Aqk[i,j] = Σ_c q̂_i k̂_j 2^(Γ_i - Γ_j)  (j <= i),
//   (I + L) [W | U] = [β 2^Γ ⊙ k̂ | β v]  (forward substitution, fp32).
// L and Aqk come from tensor-core products (split-bf16 operands, ~fp32 accurate) per 16-row block I with a
// reference row m:
//   factor_i = x_i ⊙ 2^(Γ_i - Γ_m) (x = k̂ or q̂, i in I),  factor_j = k̂_j ⊙ 2^(Γ_m - Γ_j).
// m = the block's first row makes every exponent <= 0 for the rows before the block (always safe, any gate).
// The diagonal block uses m = its middle row when every |Γ - Γ_m| there stays under kSafeLog2 (always for
// K3's bounded gate); otherwise it is computed directly in fp32 with one exp per pair and channel.
// [W | U] either by forward substitution, one column per thread (solve_column, the default), or (option
// kda_intra_tensor_solve, off until run on a GPU) as T [β 2^Γ ⊙ k̂ | β v] with T = (I + L)^-1 inverted
// in fp32 by 16-row blocks (intra_inverse.h) and the product on the tensor cores (split-bf16 operands, like
// L and Aqk): the substitution's 2016 dependent multiply-adds and shared loads a thread were most of the
// kernel's issued instructions.
#include <cstddef>

#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/kda/config.h"
#include "backend/cuda/kda/device.cuh"
#include "backend/cuda/kda/intra_inverse.h"
#include "backend/cuda/kda/phases.h"

namespace rill::cuda::kda {
namespace {

struct IntraSmem {
  bf16 k[kChunk][kLdH];        // raw k rows (bf16 inputs; zero past the chunk end). q is read from global.
  float G[kChunk][kLdG];       // Γ * log2(e); then (tensor solve) T split, [hi, lo][kChunk][kLdT] bf16
  float L[kChunk][kLdL];       // strictly lower part used; then (tensor solve) (I + L)^-1 below the diagonal
  bf16 fa[2][2 * kSub][kLdH];  // [hi, lo] block-row factors: rows 0-15 k-side, 16-31 q-side
  bf16 fb[2][2 * kSub][kLdH];  // [hi, lo] column factors, 32 columns j at a time
  // (tensor solve: fa and fb together hold the right-hand side, [hi, lo][kChunk][kLdH] bf16; fa alone first
  // holds one 16-row block's products M, fp32 [kSub][3 * kSub])
  float qn[kChunk];            // 1/|q| * d^-1/2
  float kn[kChunk];            // 1/|k|
  float beta[kChunk];
};
static_assert(kIntraThreads == 2 * kHeadDim, "thread = channel x half, and one solve column per thread");
constexpr int kLdT = kChunk + 8;  // bf16 [*, 64] row of T: 144 B, conflict-free ldmatrix
static_assert(2 * kChunk * kLdT * sizeof(bf16) <= sizeof(float) * kChunk * kLdG, "T split fits over G");
static_assert(offsetof(IntraSmem, fb) == offsetof(IntraSmem, fa) + sizeof(IntraSmem::fa) &&
                  2 * kChunk * kLdH * sizeof(bf16) == sizeof(IntraSmem::fa) + sizeof(IntraSmem::fb),
              "the right-hand side fills fa and fb exactly");
static_assert(kSub * 3 * kSub * sizeof(float) <= sizeof(IntraSmem::fa), "M fits in fa");

__device__ __forceinline__ void load_g8(const float* row, int c, float (&x)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(row + c),
               b = *reinterpret_cast<const float4*>(row + c + 4);
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}

// Raw q[t0 + i][h][c .. c+7], zero past the chunk end.
__device__ __forceinline__ void load_q8(const AttentionIo& io, int t0, int n_rows, int h, int i, int c,
                                        float (&x)[8]) {
  if (i < n_rows) {
    load8(io.q + int64_t(t0 + i) * io.ld_q + h * kHeadDim + c, x);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = 0.0f;
  }
}

// x = hi + lo with both halves bf16: three bf16 products (hi hi + hi lo + lo hi) then carry ~fp32 accuracy.
__device__ __forceinline__ void store_split8(bf16* hi, bf16* lo, const float (&x)[8]) {
  float h[8], l[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    h[e] = __bfloat162float(__float2bfloat16_rn(x[e]));
    l[e] = x[e] - h[e];
  }
  store8(hi, h);
  store8(lo, l);
}

// L (block rows r0..r0+15, columns j < nb) and Aqk (same entries) on the tensor cores, factored around m,
// in passes of 32 columns. Split-bf16 operands: with bf16 alone, a q̂.k̂ that cancels ~sqrt(d)-fold (random
// inputs, short sequences) lost up to ~8% of its value.
__device__ void block_products(const ChunkParams& p, IntraSmem& sm, int r0, int m, int nb, int t0, int n_rows,
                               int64_t tok0, int h) {
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  for (int j0 = 0; j0 < nb; j0 += 2 * kSub) {
    const int nj = min(2 * kSub, nb - j0), fa_rows = j0 == 0 ? 2 * kSub : 0;
    const int units = (fa_rows + nj) * (kHeadDim / 8);
    for (int u = tid; u < units; u += kIntraThreads) {
      const int row = u >> 4, c = (u & 15) * 8;
      float gm[8], gx[8], x[8];
      load_g8(sm.G[m], c, gm);
      if (row < fa_rows) {
        const int i = r0 + (row & (kSub - 1));
        const bool is_q = row >= kSub;
        float sc;
        if (is_q) {
          load_q8(p.io, t0, n_rows, h, i, c, x);
          sc = sm.qn[i];
        } else {
          load8(&sm.k[i][c], x);
          sc = sm.kn[i];
        }
        load_g8(sm.G[i], c, gx);
#pragma unroll
        for (int e = 0; e < 8; ++e) x[e] = x[e] * sc * ex2(gx[e] - gm[e]);
        store_split8(&sm.fa[0][row][c], &sm.fa[1][row][c], x);
      } else {
        const int jr = row - fa_rows, j = j0 + jr;
        load8(&sm.k[j][c], x);
        load_g8(sm.G[j], c, gx);
        const float sc = sm.kn[j];
#pragma unroll
        for (int e = 0; e < 8; ++e) x[e] = x[e] * sc * ex2(gm[e] - gx[e]);
        store_split8(&sm.fb[0][jr][c], &sm.fb[1][jr][c], x);
      }
    }
    __syncthreads();
    // Warp w: m-tile w & 1 (0: k rows -> L, 1: q rows -> Aqk), n-tile w >> 1.
    const int mt = warp & 1, nt = warp >> 1;
    if (nt * 8 < nj) {
      float acc[4] = {};
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 16; ++kk) {
        uint32_t ah[4], al[4], bh[2], bl[2];
        load_a(ah, &sm.fa[0][0][0], kLdH, mt * 16, kk * 16, lane);
        load_a(al, &sm.fa[1][0][0], kLdH, mt * 16, kk * 16, lane);
        load_b_nk(bh, &sm.fb[0][0][0], kLdH, nt * 8, kk * 16, lane);
        load_b_nk(bl, &sm.fb[1][0][0], kLdH, nt * 8, kk * 16, lane);
        mma_bf16(acc, al, bh);
        mma_bf16(acc, ah, bl);
        mma_bf16(acc, ah, bh);
      }
      const int g = lane >> 2, tq = lane & 3, j = j0 + nt * 8 + 2 * tq;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i = r0 + g + 8 * hh;
        const float v0 = acc[2 * hh], v1 = acc[2 * hh + 1];
        if (mt == 0) {
          sm.L[i][j] = j < i ? sm.beta[i] * v0 : 0.0f;
          sm.L[i][j + 1] = j + 1 < i ? sm.beta[i] * v1 : 0.0f;
        } else if (i < n_rows) {
          *reinterpret_cast<uint32_t*>(p.s.aqk + (tok0 + i) * kChunk + j) =
              pack_bf16x2(j <= i ? v0 : 0.0f, j + 1 <= i ? v1 : 0.0f);
        }
      }
    }
    __syncthreads();
  }
}

// Diagonal 16x16 blocks of L and Aqk in fp32, one exp per (pair, channel): the fallback for steep decays.
__device__ void diagonal_direct(const ChunkParams& p, IntraSmem& sm, int t0, int n_rows, int64_t tok0,
                                int h) {
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int quarter = lane >> 3;  // 32 channels each; the 8 lanes of a quarter hold 8 pairs of one row
  for (int it = 0; it < 4 * kSub * kSub / 64; ++it) {
    const int pair = it * 64 + warp * 8 + (lane & 7);
    const int blk = pair >> 8, r = (pair >> 4) & (kSub - 1), c = pair & (kSub - 1);
    const int i = blk * kSub + r, j = blk * kSub + c;
    float lk = 0.0f, aq = 0.0f;
    if (c <= r) {
#pragma unroll
      for (int cc = 0; cc < 32; cc += 8) {
        const int ch = quarter * 32 + cc;
        float qi[8], ki[8], kj[8], gi[8], gj[8];
        load_q8(p.io, t0, n_rows, h, i, ch, qi);
        load8(&sm.k[i][ch], ki);
        load8(&sm.k[j][ch], kj);
        load_g8(sm.G[i], ch, gi);
        load_g8(sm.G[j], ch, gj);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float d = ex2(gi[e] - gj[e]) * kj[e];
          lk = fmaf(ki[e], d, lk);
          aq = fmaf(qi[e], d, aq);
        }
      }
    }
    lk += __shfl_xor_sync(0xffffffffu, lk, 8);
    lk += __shfl_xor_sync(0xffffffffu, lk, 16);
    aq += __shfl_xor_sync(0xffffffffu, aq, 8);
    aq += __shfl_xor_sync(0xffffffffu, aq, 16);
    if (quarter == 0) {
      if (c < r) sm.L[i][j] = sm.beta[i] * sm.kn[i] * sm.kn[j] * lk;
      if (i < n_rows) p.s.aqk[(tok0 + i) * kChunk + j] = to_bf16(c <= r ? sm.qn[i] * sm.kn[j] * aq : 0.0f);
    }
  }
  __syncthreads();
}

// (I + L) x = rhs for one column of [W | U] per thread, all 64 rows in registers.
__device__ void solve_column(const ChunkParams& p, IntraSmem& sm, int t0, int n_rows, int64_t tok0, int h) {
  const int col = int(threadIdx.x);
  const bool is_w = col < kHeadDim;
  const int c = is_w ? col : col - kHeadDim;
  float x[kChunk];
  if (is_w) {
#pragma unroll
    for (int i = 0; i < kChunk; ++i)
      x[i] = sm.beta[i] * sm.kn[i] * __bfloat162float(sm.k[i][c]) * ex2(sm.G[i][c]);
  } else {
    const bf16* v = p.io.v + int64_t(h) * kHeadDim + c;
#pragma unroll
    for (int i = 0; i < kChunk; ++i)
      x[i] = i < n_rows ? sm.beta[i] * __bfloat162float(v[int64_t(t0 + i) * p.io.ld_v]) : 0.0f;
  }
#pragma unroll
  for (int i = 1; i < kChunk; ++i) {
    const float* Li = sm.L[i];
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma unroll
    for (int j = 0; j + 3 < i; j += 4) {
      const float4 l = *reinterpret_cast<const float4*>(Li + j);
      a0 = fmaf(l.x, x[j], a0);
      a1 = fmaf(l.y, x[j + 1], a1);
      a2 = fmaf(l.z, x[j + 2], a2);
      a3 = fmaf(l.w, x[j + 3], a3);
    }
#pragma unroll
    for (int j = i & ~3; j < i; ++j) a0 = fmaf(Li[j], x[j], a0);
    x[i] -= (a0 + a1) + (a2 + a3);
  }
  bf16* dst = (is_w ? p.s.w : p.s.u) + tok0 * kHeadDim + c;
#pragma unroll
  for (int i = 0; i < kChunk; ++i)
    if (i < n_rows) dst[int64_t(i) * kHeadDim] = to_bf16(x[i]);
}

// T = (I + L)^-1 in place in sm.L (fp32, strictly lower part): intra_inverse.h's steps, a thread per
// diagonal-block column, then per block row a thread per element of M (in fa) and of T, barriers between.
__device__ void invert_unit_lower(IntraSmem& sm) {
  static_assert(kInvBlock == kSub && 3 * kSub == kChunk - kSub, "16-row blocks; M's rows hold i0 <= 48");
  const int tid = int(threadIdx.x);
  float* L = &sm.L[0][0];
  float x[kSub];
  if (tid < kChunk) inverse_diagonal_column(L, kLdL, (tid / kSub) * kSub, tid % kSub, x);
  __syncthreads();  // every diagonal block read before any is overwritten
  if (tid < kChunk) {
    const int b0 = (tid / kSub) * kSub, c = tid % kSub;
#pragma unroll
    for (int r = 0; r < kSub; ++r)
      if (r > c) sm.L[b0 + r][b0 + c] = x[r];
  }
  __syncthreads();
  constexpr int kLdM = 3 * kSub;
  float* M = reinterpret_cast<float*>(&sm.fa[0][0][0]);  // [kSub][kLdM]
  for (int i0 = kSub; i0 < kChunk; i0 += kSub) {         // block rows; their columns left of the diagonal: i0
    for (int e = tid; e < kSub * i0; e += kIntraThreads)
      M[(e / i0) * kLdM + e % i0] = inverse_block_product(L, kLdL, i0, e / i0, e % i0);
    __syncthreads();
    for (int e = tid; e < kSub * i0; e += kIntraThreads)
      sm.L[i0 + e / i0][e % i0] = inverse_block_entry(L, kLdL, i0, e / i0, e % i0, M, kLdM);
    __syncthreads();
  }
}

// The right-hand side of 128 columns (W: β kn k 2^Γ, from shared memory; U: β v, from global memory) as
// split bf16 [hi, lo][k row][column] into fa/fb, 8 columns of one row per unit (a warp: 32 rows).
template <bool kW>
__device__ void stage_rhs(const ChunkParams& p, IntraSmem& sm, int t0, int n_rows, int h) {
  bf16* R = &sm.fa[0][0][0];
  for (int u = int(threadIdx.x); u < kChunk * (kHeadDim / 8); u += kIntraThreads) {
    const int i = u & (kChunk - 1), c = (u >> 6) * 8;
    float x[8];
    if constexpr (kW) {
      float gi[8];
      load8(&sm.k[i][c], x);
      load_g8(sm.G[i], c, gi);
      const float bk = sm.beta[i] * sm.kn[i];
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = bk * x[e] * ex2(gi[e]);
    } else if (i < n_rows) {
      load8(p.io.v + int64_t(t0 + i) * p.io.ld_v + h * kHeadDim + c, x);
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = sm.beta[i] * x[e];
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = 0.0f;
    }
    store_split8(R + i * kLdH + c, R + (kChunk + i) * kLdH + c, x);
  }
}

// dst[row][c] = (T R)[row][c] for the chunk's rows: warp w computes columns 16 w .. 16 w + 15 (two n8 tiles)
// of all 64 rows, only the k blocks at or left of each row block (T is lower triangular).
__device__ void tensor_product(const IntraSmem& sm, bf16* dst, int n_rows) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const bf16* T = reinterpret_cast<const bf16*>(&sm.G[0][0]);
  const bf16* R = &sm.fa[0][0][0];
  float acc[kChunk / kSub][2][4] = {};
#pragma unroll
  for (int ks = 0; ks < kChunk / kSub; ++ks) {
    uint32_t bh0[2], bh1[2], bl0[2], bl1[2];
    load_b_kn_x2(bh0, bh1, R, kLdH, ks * kSub, warp * 16, lane);
    load_b_kn_x2(bl0, bl1, R + kChunk * kLdH, kLdH, ks * kSub, warp * 16, lane);
#pragma unroll
    for (int mi = ks; mi < kChunk / kSub; ++mi) {
      uint32_t ah[4], al[4];
      load_a(ah, T, kLdT, mi * kSub, ks * kSub, lane);
      load_a(al, T + kChunk * kLdT, kLdT, mi * kSub, ks * kSub, lane);
      mma_bf16(acc[mi][0], al, bh0);
      mma_bf16(acc[mi][0], ah, bl0);
      mma_bf16(acc[mi][0], ah, bh0);
      mma_bf16(acc[mi][1], al, bh1);
      mma_bf16(acc[mi][1], ah, bl1);
      mma_bf16(acc[mi][1], ah, bh1);
    }
  }
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mi = 0; mi < kChunk / kSub; ++mi)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int row = mi * kSub + g + 8 * hh, col = warp * 16 + nt * 8 + 2 * tq;
        if (row < n_rows)
          *reinterpret_cast<uint32_t*>(dst + int64_t(row) * kHeadDim + col) =
              pack_bf16x2(acc[mi][nt][2 * hh], acc[mi][nt][2 * hh + 1]);
      }
}

// [W | U] = T [β 2^Γ ⊙ k̂ | β v] (file comment): invert, stage W's right-hand side (the last use of Γ), T as
// split bf16 over Γ, W's product; U's right-hand side, U's product.
__device__ void solve_tensor(const ChunkParams& p, IntraSmem& sm, int t0, int n_rows, int64_t tok0, int h) {
  invert_unit_lower(sm);
  stage_rhs<true>(p, sm, t0, n_rows, h);
  __syncthreads();  // Γ read; M (in fa) long dead
  bf16* T = reinterpret_cast<bf16*>(&sm.G[0][0]);
  for (int u = int(threadIdx.x); u < kChunk * (kChunk / 8); u += kIntraThreads) {
    const int i = u >> 3, c = (u & 7) * 8;
    float x[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = c + e < i ? sm.L[i][c + e] : c + e == i ? 1.0f : 0.0f;
    store_split8(T + i * kLdT + c, T + (kChunk + i) * kLdT + c, x);
  }
  __syncthreads();
  tensor_product(sm, p.s.w + tok0 * kHeadDim, n_rows);
  __syncthreads();  // W's right-hand side read
  stage_rhs<false>(p, sm, t0, n_rows, h);
  __syncthreads();
  tensor_product(sm, p.s.u + tok0 * kHeadDim, n_rows);
}

template <bool kTensorSolve>
__global__ void __launch_bounds__(kIntraThreads, 2) kda_chunk_intra_kernel(const ChunkParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  IntraSmem& sm = *reinterpret_cast<IntraSmem*>(smem_raw);
  const AttentionIo& io = p.io;
  const int id = int(blockIdx.x), h = int(blockIdx.y);
  if (id >= p.plan.counts[1]) return;
  const int2 info = p.plan.chunk_info[id];
  const int t0 = io.seq_token_start[info.x] + info.y * kChunk;
  const int n_rows = min(kChunk, io.seq_token_start[info.x + 1] - t0);
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int64_t tok0 = int64_t(h) * io.n_tokens + t0;  // row of (h, t0) in the head-major scratch

  // 1. k -> smem (zero rows past the end); Γ by a per-channel scan in two 32-row halves; beta.
  for (int u = tid; u < kChunk * (kHeadDim / 8); u += kIntraThreads) {
    const int r = u >> 4, c = (u & 15) * 8;
    const bool ok = r < n_rows;
    const int64_t tr = t0 + (ok ? r : 0);
    cp_async16(&sm.k[r][c], io.k + tr * io.ld_k + h * kHeadDim + c, ok);
  }
  cp_async_commit();
  const int gc = tid & (kHeadDim - 1), half = tid >> 7;
  float gl[kChunk / 2];
  {
    const float* gp = io.g + int64_t(h) * kHeadDim + gc;
    float acc = 0.0f;
#pragma unroll
    for (int r = 0; r < kChunk / 2; ++r) {
      const int i = half * (kChunk / 2) + r;
      acc += (i < n_rows ? gp[int64_t(t0 + i) * io.ld_g] : 0.0f) * kLog2e;
      gl[r] = acc;
    }
    if (half == 0) {
#pragma unroll
      for (int r = 0; r < kChunk / 2; ++r) sm.G[r][gc] = gl[r];
    }
  }
  if (tid < kChunk) sm.beta[tid] = tid < n_rows ? io.beta[int64_t(t0 + tid) * io.ld_beta + h] : 0.0f;
  cp_async_wait_all();
  __syncthreads();
  if (half == 1) {
    const float base = sm.G[kChunk / 2 - 1][gc];
#pragma unroll
    for (int r = 0; r < kChunk / 2; ++r) sm.G[kChunk / 2 + r][gc] = gl[r] + base;
  }
  {
    const float scale = 1.0f / sqrtf(float(kHeadDim));
    for (int rr = 0; rr < kChunk / 8; ++rr) {  // warp w: rows 8w .. 8w + 7
      const int i = warp * (kChunk / 8) + rr;
      float2 q01 = make_float2(0.0f, 0.0f), q23 = q01;
      if (i < n_rows) {
        const uint2 qu =
            *reinterpret_cast<const uint2*>(io.q + int64_t(t0 + i) * io.ld_q + h * kHeadDim + lane * 4);
        q01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&qu.x));
        q23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&qu.y));
      }
      const float2 k01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&sm.k[i][lane * 4]));
      const float2 k23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&sm.k[i][lane * 4 + 2]));
      const float qs = warp_sum(q01.x * q01.x + q01.y * q01.y + q23.x * q23.x + q23.y * q23.y);
      const float ks = warp_sum(k01.x * k01.x + k01.y * k01.y + k23.x * k23.x + k23.y * k23.y);
      if (lane == 0) {
        sm.qn[i] = 1.0f / sqrtf(qs + 1e-6f) * scale;
        sm.kn[i] = 1.0f / sqrtf(ks + 1e-6f);
      }
    }
  }
  __syncthreads();

  // 2. Can the diagonal blocks be factored around their middle rows?
  bool unsafe = false;
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    const int r0 = (half * 2 + b) * kSub, m = r0 + kSub / 2;
    unsafe |= sm.G[r0][gc] - sm.G[m][gc] > kSafeLog2 || sm.G[m][gc] - sm.G[r0 + kSub - 1][gc] > kSafeLog2;
  }
  const bool safe = __syncthreads_or(unsafe) == 0;

  // 3. Qg, Kd, gamma; zeros of Aqk right of each row's diagonal block.
  const int last = n_rows - 1;
  for (int u = tid; u < n_rows * (kHeadDim / 8); u += kIntraThreads) {
    const int i = u >> 4, c = (u & 15) * 8;
    float qv[8], kv[8], gi[8], gl8[8];
    load_q8(io, t0, n_rows, h, i, c, qv);
    load8(&sm.k[i][c], kv);
    load_g8(sm.G[i], c, gi);
    load_g8(sm.G[last], c, gl8);
    const float qn = sm.qn[i], kn = sm.kn[i];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      qv[e] = qv[e] * qn * ex2(gi[e]);
      kv[e] = kv[e] * kn * ex2(gl8[e] - gi[e]);
    }
    store8(p.s.qg + (tok0 + i) * kHeadDim + c, qv);
    store8(p.s.kd + (tok0 + i) * kHeadDim + c, kv);
  }
  if (tid < kHeadDim) p.s.gamma[(int64_t(id) * io.n_heads + h) * kHeadDim + tid] = ex2(sm.G[last][tid]);
  for (int u = tid; u < n_rows * (kChunk / 8); u += kIntraThreads) {
    const int i = u >> 3, c = (u & 7) * 8;
    if (c >= (i / kSub + 1) * kSub)
      *reinterpret_cast<uint4*>(p.s.aqk + (tok0 + i) * kChunk + c) = make_uint4(0, 0, 0, 0);
  }

  // 4. L and Aqk: tensor cores for every block below the diagonal (and the diagonal itself when safe).
  for (int I = 0; I < kChunk / kSub; ++I) {
    const int r0 = I * kSub;
    const int nb = safe ? r0 + kSub : r0;
    if (nb > 0) block_products(p, sm, r0, safe ? r0 + kSub / 2 : r0, nb, t0, n_rows, tok0, h);
  }
  if (!safe) diagonal_direct(p, sm, t0, n_rows, tok0, h);

  // 5. W and U.
  if constexpr (kTensorSolve) {  // (block_products and diagonal_direct end on a barrier: L is complete)
    solve_tensor(p, sm, t0, n_rows, tok0, h);
  } else {
    solve_column(p, sm, t0, n_rows, tok0, h);
  }
}

}  // namespace

Status launch_chunk_intra(const ChunkParams& p, int n_chunks, const CudaContext& cx) {
  if (n_chunks == 0) return {};
  static std::atomic<uint64_t> done{0};
  static std::atomic<uint64_t> done_serial{0};
  const bool tensor = cx.options.kda_intra_tensor_solve;
  auto* kernel = tensor ? kda_chunk_intra_kernel<true> : kda_chunk_intra_kernel<false>;
  RILL_TRY(opt_in_smem("kda", reinterpret_cast<const void*>(kernel), sizeof(IntraSmem), cx,
                       tensor ? &done : &done_serial));
  const dim3 grid(unsigned(n_chunks), unsigned(p.io.n_heads));
  kernel<<<grid, kIntraThreads, sizeof(IntraSmem), cx.stream>>>(p);
  RILL_CUDA_CHECK_LAUNCH("kda_chunk_intra");
  return {};
}

}  // namespace rill::cuda::kda
