// Routed experts: out[t] = bf16( sum_j w[t,j] * bf16(Expert_{id[t,j]}(x_t)) ), the sum in fp32 over j in
// order. Expert(x) = down(bf16(act(bf16(gate x), bf16(up x)))). Two paths, chosen from host-known shapes only
// (the same choice when planning and in the real run, so the scratch matches):
//  - decode (T*k <= kDecodeMaxPairs, MXFP4 with T*k <= E/4, or shapes the grouped kernels cannot take): two
//    gathered GEMV kernels.
//    gate_up: grid (I/16, pairs), a warp computes 2 gate and 2 up rows for its pair with 16-byte loads (8 in
//    flight per lane), x in shared memory. down: grid (Hx/4, T), warp w computes the block's 4 output rows
//    for experts j = w, w + 8, ... (a warp per slot, up to 16), the token's activations read through L1; the
//    k rows are combined in order in shared memory. Memory-bound on the experts' weights (more, smaller
//    blocks than before: the first version's 144 down blocks ran at ~50% of bandwidth). For 1-2 tokens a bf16
//    shared expert rides along as pair T*k + t of gate_up and slot k of down, added as bf16(bf16(routed) +
//    shared). MXFP4 experts (spec §2.4) have their own pair, with the same grids' roles and rounding points.
//    gate_up runs on the tensor cores: each warp decodes 8 gate and 8 up rows two codes at a time with
//    integer ops and one bf16 multiply (device.cuh: exact, scaled) straight into mma.sync A fragments, x as
//    B. down keeps the FMA form (8 rows per block, 16-column lane steps, the decoded codes fma'd in fp32
//    against the activation and the row's E8M0 scale applied once per step). No bf16 copy of the weights
//    exists.
//  - grouped (prefill): plan (count per expert, exclusive scans, scatter pairs to expert-ordered slots) ->
//    grouped gate_up GEMM with the activation in its epilogue -> grouped down GEMM -> combine per token over
//    its k slots in order (deterministic, no atomics). Compute-bound on tensor cores. MXFP4 experts take the
//    same plan, scratch and combine with the MXFP4 grouped GEMMs (grouped_gemm_mxfp4.cu: packed bytes and
//    scales into shared memory, dequantised there to a bf16 tile before the MMAs; no bf16 copy in global
//    memory), and FP8 experts with the same kernel body's Fp8Tile policy (E4M3 codes x F32 block scale).
//    bf16 steps of at least options.moe_cublas_min_pairs pairs outside a graph capture run the two GEMMs
//    through cuBLAS's grouped GEMM instead (grouped_cublas_path.cu; faster at every size measured); FP8 and
//    MXFP4 experts always take rill's kernels. With options.moe_wgmma on an sm_90 device, bf16 steps whose
//    tensors TMA takes run the Hopper kernels first (grouped_wgmma.cu: TMA, wgmma, persistent CTAs; no
//    readback, so inside graph captures too). With options.moe_wgmma_fp8 (on by default), FP8 experts with
//    128 x 128 blocks run the same kernel body's FP8 policy (grouped_wgmma.cu Fp8Weights: activations
//    quantised per slot and 128 columns, wgmma on E4M3 codes, block scales applied per k block in fp32), and
//    those with per-channel scales its Fp8ChannelWeights policy (activations quantised per slot, the scales
//    applied in the epilogue). With
//    options.moe_wgmma_mxfp4 (on by default), MXFP4 steps of at least options.moe_wgmma_mxfp4_min_pairs
//    pairs run the bf16 Hopper kernel's MXFP4 policy (codes dequantised to bf16 in shared memory by its
//    consumer warpgroups).
// Expert ids outside [0, E) contribute nothing (they cannot be reported from the device).
#include <cub/block/block_scan.cuh>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "backend/cuda/common/align.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/mma.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/smem.h"
#include "backend/cuda/moe/device.cuh"
#include "backend/cuda/moe/grouped_cublas_path.h"
#include "backend/cuda/moe/grouped_wgmma.h"
#include "backend/cuda/moe/moe.h"
#include "backend/cuda/moe/params.h"
#include "backend/cuda/moe/wgmma_schedule.h"

namespace rill::cuda {
namespace {

using moe::Act;
using moe::bf16;
using moe::DecodeParams;
using moe::GroupedGemmParams;

constexpr int kGemvThreads = 256, kGemvWarps = kGemvThreads / 32;
constexpr int kGateUpRowsPerWarp = 2;  // i values (each a gate and an up row) per warp
constexpr int kDownRows = 4;           // output rows per block of the down GEMV
// The down GEMV's block has a warp per slot (k routed experts + the shared one), up to 16: with eight warps
// for k = 8 plus a shared expert, one warp did two experts and the kernel took twice as long.
constexpr int kDownMaxThreads = 512;
// The shared expert joins the decode GEMVs for steps of at most this many tokens: each token's pair re-reads
// its weights, where the separate GEMV reads them once for up to kGemvMaxRows tokens.
constexpr int64_t kSharedFuseMaxTokens = 2;
constexpr int kPlanThreads = 1024;
// The multi-CTA plan (steps of at least kPlanMultiMinPairs pairs): CTAs of kPlanCtaThreads threads over
// chunks of at least kPlanChunk pairs, at most kPlanMaxCtas of them.
constexpr int kPlanCtaThreads = 256, kPlanChunk = 2048, kPlanMaxCtas = 128;
constexpr int64_t kPlanMultiMinPairs = 8192;

// CTAs of the multi-CTA plan for a step of `pairs` pairs (1: the one-CTA kernel), and their chunk.
int plan_ctas(int64_t pairs) {
  if (pairs < kPlanMultiMinPairs) return 1;
  return int(std::min<int64_t>(kPlanMaxCtas, (pairs + kPlanChunk - 1) / kPlanChunk));
}
int plan_chunk(int64_t pairs, int ctas) {
  return int((pairs + ctas - 1) / ctas);
}

// ---------------------------------------------------------------------------------------------- decode path

// How the bf16-path decode GEMVs read an expert row: kVec weights from column c, widened to fp32 (style.md
// §7.10: one kernel body, a load policy per weight format). Bf16Rows reads bf16. Fp8Rows reads E4M3 codes (half
// the bytes; issue #35) times the F32 scale of their block, exact in fp32 like the CPU's dequantisation; a
// kVec chunk never spans two blocks (block columns are a multiple of 8, checked on the host, and of 16 for the
// 16-code loads, which keep as many bytes in flight per lane as bf16's 16-byte loads: with 8-byte loads the FP8
// GEMVs took as long as bf16's, ncu on the H200).
struct Bf16Rows {
  static constexpr bool kFp8 = false;
  struct Row {
    const bf16* w;
    template <int kVec>
    __device__ __forceinline__ void load(int c, float (&wv)[kVec]) const {
      moe::load_bf16<kVec>(w + c, wv);
    }
  };
  __device__ static Row gate_up(const DecodeParams& p, int e, int row) {
    return {p.gate_up + int64_t(e) * p.gu_expert_stride + int64_t(row) * p.gu_ld};
  }
  __device__ static Row down(const DecodeParams& p, int e, int row) {
    return {p.down + int64_t(e) * p.dn_expert_stride + int64_t(row) * p.dn_ld};
  }
  __device__ static Row shared_gate_up(const DecodeParams& p, int row) {
    return {p.sh_gate_up + int64_t(row) * p.sh_gu_ld};
  }
  __device__ static Row shared_down(const DecodeParams& p, int row) { return {p.sh_down + int64_t(row) * p.sh_dn_ld}; }
};

struct Fp8Rows {
  static constexpr bool kFp8 = true;
  struct Row {
    const uint8_t* w;
    const float* scales;  // the row's block row of scales
    int block_cols;
    template <int kVec>
    __device__ __forceinline__ void load(int c, float (&wv)[kVec]) const {
      const float s = __ldg(scales + c / block_cols);
      if constexpr (kVec == 16) {
        const uint4 u = __ldg(reinterpret_cast<const uint4*>(w + c));
        const __nv_fp8x2_storage_t* q = reinterpret_cast<const __nv_fp8x2_storage_t*>(&u);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float2 t = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(q[i], __NV_E4M3)));
          wv[2 * i] = t.x * s;
          wv[2 * i + 1] = t.y * s;
        }
      } else if constexpr (kVec == 8) {
        const uint2 u = __ldg(reinterpret_cast<const uint2*>(w + c));
        const __nv_fp8x2_storage_t* q = reinterpret_cast<const __nv_fp8x2_storage_t*>(&u);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 t = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(q[i], __NV_E4M3)));
          wv[2 * i] = t.x * s;
          wv[2 * i + 1] = t.y * s;
        }
      } else {
#pragma unroll
        for (int v = 0; v < kVec; ++v)
          wv[v] = __half2float(__half(__nv_cvt_fp8_to_halfraw(w[c + v], __NV_E4M3))) * s;
      }
    }
  };
  __device__ static Row gate_up(const DecodeParams& p, int e, int row) {
    return {p.gu_fp8 + int64_t(e) * p.gu_expert_stride + int64_t(row) * p.gu_ld,
            p.gu_fp8_scales + int64_t(e) * p.gu8s_expert_stride + int64_t(row / p.fp8_block_rows) * p.gu8s_ld,
            p.fp8_block_cols};
  }
  __device__ static Row down(const DecodeParams& p, int e, int row) {
    return {p.dn_fp8 + int64_t(e) * p.dn_expert_stride + int64_t(row) * p.dn_ld,
            p.dn_fp8_scales + int64_t(e) * p.dn8s_expert_stride + int64_t(row / p.fp8_block_rows) * p.dn8s_ld,
            p.fp8_block_cols};
  }
  __device__ static Row shared_gate_up(const DecodeParams& p, int row) {
    return {p.sh_gu_fp8 + int64_t(row) * p.sh_gu_ld,
            p.sh_gu_fp8_scales + int64_t(row / p.sh_fp8_block_rows) * p.sh_gu8s_ld, p.sh_fp8_block_cols};
  }
  __device__ static Row shared_down(const DecodeParams& p, int row) {
    return {p.sh_dn_fp8 + int64_t(row) * p.sh_dn_ld,
            p.sh_dn_fp8_scales + int64_t(row / p.sh_fp8_block_rows) * p.sh_dn8s_ld, p.sh_fp8_block_cols};
  }
};

// grid (I / 32, min(pairs, 65535)); blocks loop over pairs when there are more.
template <int kVec, class W>
__global__ void __launch_bounds__(kGemvThreads) moe_gate_up_gemv_kernel(const DecodeParams p) {
  pdl_prologue();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* xs = reinterpret_cast<bf16*>(smem_raw);  // [Hx]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int i0 = (blockIdx.x * kGemvWarps + warp) * kGateUpRowsPerWarp;
  const int n_routed = p.T * p.k, n_pairs = n_routed + (p.Is > 0 ? p.T : 0);
  for (int pair = blockIdx.y; pair < n_pairs; pair += gridDim.y) {
    const bool shared = pair >= n_routed;
    const int t = shared ? pair - n_routed : pair / p.k, j = pair - t * p.k;
    const bf16* x = p.x + int64_t(t) * p.ldx;
    __syncthreads();  // the previous pair's readers of xs are done
    for (int c = threadIdx.x * kVec; c < p.Hx; c += kGemvThreads * kVec) {
      if constexpr (kVec % 8 == 0) {
#pragma unroll
        for (int h = 0; h < kVec / 8; ++h)
          *reinterpret_cast<uint4*>(xs + c + 8 * h) = *reinterpret_cast<const uint4*>(x + c + 8 * h);
      } else
        xs[c] = x[c];
    }
    __syncthreads();
    const int I = shared ? p.Is : p.I;  // grid.x covers the wider of I and Is
    if (i0 >= I) continue;
    bf16* h;
    typename W::Row rows[2 * kGateUpRowsPerWarp];  // gate rows i0.., then up rows I + i0..
    if (shared) {
      h = p.h + int64_t(n_routed) * p.I + int64_t(t) * p.Is;
#pragma unroll
      for (int q = 0; q < kGateUpRowsPerWarp; ++q) {
        const int i = min(i0 + q, I - 1);  // rows past I compute a duplicate that is never stored
        rows[q] = W::shared_gate_up(p, i);
        rows[kGateUpRowsPerWarp + q] = W::shared_gate_up(p, I + i);
      }
    } else {
      const int e = p.ids[int64_t(t) * p.ld_ids + j];
      h = p.h + int64_t(pair) * p.I;
      if (e < 0 || e >= p.E) {
        if (lane < kGateUpRowsPerWarp && i0 + lane < p.I) h[i0 + lane] = __float2bfloat16_rn(0.0f);
        continue;
      }
#pragma unroll
      for (int q = 0; q < kGateUpRowsPerWarp; ++q) {
        const int i = min(i0 + q, I - 1);  // rows past I compute a duplicate that is never stored
        rows[q] = W::gate_up(p, e, i);
        rows[kGateUpRowsPerWarp + q] = W::gate_up(p, e, I + i);
      }
    }
    float acc[2 * kGateUpRowsPerWarp];
#pragma unroll
    for (int r = 0; r < 2 * kGateUpRowsPerWarp; ++r) acc[r] = 0.0f;
#pragma unroll 2
    for (int c = lane * kVec; c < p.Hx; c += 32 * kVec) {
      float xv[kVec], wv[2 * kGateUpRowsPerWarp][kVec];
#pragma unroll
      for (int r = 0; r < 2 * kGateUpRowsPerWarp; ++r) rows[r].template load<kVec>(c, wv[r]);
      moe::load_bf16<kVec>(xs + c, xv);
#pragma unroll
      for (int r = 0; r < 2 * kGateUpRowsPerWarp; ++r)
#pragma unroll
        for (int v = 0; v < kVec; ++v) acc[r] = fmaf(wv[r][v], xv[v], acc[r]);
    }
#pragma unroll
    for (int r = 0; r < 2 * kGateUpRowsPerWarp; ++r) acc[r] = moe::warp_sum_f(acc[r]);
#pragma unroll
    for (int q = 0; q < kGateUpRowsPerWarp; ++q)
      if (lane == q && i0 + q < I)
        h[i0 + q] = __float2bfloat16_rn(moe::expert_act(p.act, moe::round_bf16(acc[q]),
                                                        moe::round_bf16(acc[kGateUpRowsPerWarp + q]), p.beta,
                                                        p.linear_beta));
  }
}

// The two down GEMVs' ends. A warp's kRows sums for expert slot j, reduced over its lanes and rounded to bf16
// (the unfused GEMM's output) into part[j * kRows + r].
template <int kRows>
__device__ __forceinline__ void store_down_rows(const float (&s)[kRows], int lane, int j, float* part) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float sum = moe::warp_sum_f(s[r]);
    if (lane == 0) part[j * kRows + r] = moe::round_bf16(sum);
  }
}
// Output row r of token t: its k routed experts' rows in order j = 0, 1, ... times their weights, in fp32 (an
// id outside [0, E), another rank's expert, adds nothing).
template <int kRows>
__device__ __forceinline__ float sum_routed_rows(const DecodeParams& p, int t, int r, const float* part) {
  float acc = 0.0f;
  for (int j = 0; j < p.k; ++j) {
    const int e = p.ids[int64_t(t) * p.ld_ids + j];
    if (e < 0 || e >= p.E) continue;
    acc += p.weights[int64_t(t) * p.ld_weights + j] * part[j * kRows + r];
  }
  return acc;
}

// grid (Hx / kDownRows, min(T, 65535)); blocks loop over tokens when there are more. Warp w computes the
// kDownRows output rows for the token's experts j = w, w + 8, ... (all of a warp's loads for one expert are
// in flight together), each expert's row rounded to bf16 into shared memory; then one thread per row adds
// the k experts in order j = 0, 1, ... with their weights in fp32 (the reference's order).
template <int kVec, class W>
__global__ void __launch_bounds__(kDownMaxThreads) moe_down_gemv_kernel(const DecodeParams p) {
  pdl_prologue();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* part = reinterpret_cast<float*>(smem_raw);  // [k, kDownRows]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int o0 = blockIdx.x * kDownRows;
  const int n = p.k * p.I;
  const int slots = p.k + (p.Is > 0 ? 1 : 0);  // slot k: the shared expert
  for (int t = blockIdx.y; t < p.T; t += gridDim.y) {
    __syncthreads();  // the previous token's readers of part are done
    for (int j = warp; j < slots; j += int(blockDim.x) / 32) {
      const bool shared = j == p.k;
      const bf16* hv_row;  // the pair's activations (read through L1)
      int I;
      typename W::Row rows[kDownRows];
      if (shared) {
        I = p.Is;
        hv_row = p.h + int64_t(p.T) * n + int64_t(t) * p.Is;
#pragma unroll
        for (int r = 0; r < kDownRows; ++r) rows[r] = W::shared_down(p, min(o0 + r, p.Hx - 1));
      } else {
        const int e = p.ids[int64_t(t) * p.ld_ids + j];
        if (e < 0 || e >= p.E) continue;
        I = p.I;
        hv_row = p.h + int64_t(t) * n + int64_t(j) * p.I;
#pragma unroll
        for (int r = 0; r < kDownRows; ++r) rows[r] = W::down(p, e, min(o0 + r, p.Hx - 1));
      }
      float s[kDownRows];
#pragma unroll
      for (int r = 0; r < kDownRows; ++r) s[r] = 0.0f;
#pragma unroll 4  // I = 1024: the whole row's 16 loads per lane in flight at once
      for (int c = lane * kVec; c < I; c += 32 * kVec) {
        float hv[kVec], wv[kDownRows][kVec];
#pragma unroll
        for (int r = 0; r < kDownRows; ++r) rows[r].template load<kVec>(c, wv[r]);
        moe::load_bf16<kVec>(hv_row + c, hv);
#pragma unroll
        for (int r = 0; r < kDownRows; ++r)
#pragma unroll
          for (int v = 0; v < kVec; ++v) s[r] = fmaf(wv[r][v], hv[v], s[r]);
      }
      store_down_rows<kDownRows>(s, lane, j, part);
    }
    __syncthreads();
    const int r = threadIdx.x;
    if (r < kDownRows && o0 + r < p.Hx) {
      float acc = sum_routed_rows<kDownRows>(p, t, r, part);
      // The shared expert joins as the unfused ops would: bf16(bf16(routed) + bf16(shared)).
      if (p.Is > 0) acc = moe::round_bf16(acc) + part[p.k * kDownRows + r];
      p.out[int64_t(t) * p.ldo + o0 + r] = __float2bfloat16_rn(acc);
    }
  }
}

// ------------------------------------------------------------------------------------ decode path, MXFP4

constexpr int kMxStep = 16;     // columns per lane step of the down GEMV: 8 packed bytes, half a scale group
constexpr int kMxDownRows = 8;  // output rows per block of the down GEMV
constexpr int kMxMmaRows = 8;   // i values per warp of the gate_up MMA kernel (8 gate + 8 up rows = one A)
constexpr int kMxMmaStep = 64;  // columns per warp step of it: 16 per lane position q
// The FMA GEMVs were latency- and ALU-bound (ncu, K3 shapes: gate_up at 2 blocks per SM with 96 registers
// kept the ALU pipe 54% busy and DRAM 28%). Row offsets instead of row pointers took down, bounded to 4
// blocks per SM, to 64 registers without spills; gate_up now runs on mma.sync (51 registers).
constexpr int kMxDownBlocksPerSm = 4;

// sum over 16 columns of fp4(code) * x in fp32, from 8 packed bytes (low nibble = even column). The codes'
// values are exact in bf16 and in fp32, so are the products; the group's scale is applied by the caller,
// once. x0: the first 8 columns (word q.x), x1: the next 8 (q.y).
__device__ __forceinline__ float fp4_dot16(const uint2 q, const float (&x0)[8], const float (&x1)[8]) {
  float acc0 = 0.0f, acc1 = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // columns i and i + 4 of each word (device.cuh's pairing)
    const float2 v = __bfloat1622float2(moe::fp4x2_to_bf162(q.x >> (4 * i)));
    const float2 u = __bfloat1622float2(moe::fp4x2_to_bf162(q.y >> (4 * i)));
    acc0 = fmaf(v.x, x0[i], acc0);
    acc1 = fmaf(v.y, x0[i + 4], acc1);
    acc0 = fmaf(u.x, x1[i], acc0);
    acc1 = fmaf(u.y, x1[i + 4], acc1);
  }
  return acc0 + acc1;
}

// The MXFP4 gate_up for decode, on the tensor cores (the FMA form was ALU-bound: every code decoded, unpacked
// to fp32 and fma'd). grid (ceil(I / 64), min(pairs, 65535)); each warp computes 8 i values of one pair as
// one m16n8k16 A operand: rows 0-7 the gate rows i, rows 8-15 the up rows I + i. Lane (g, q) = (lane / 4,
// lane % 4) reads 16 columns (8 packed bytes) of its gate and up row i0 + g per 64-column step, decodes them
// in pairs straight into A fragments (fp4x2_scaled_bf162: exact, scaled), and x comes as B from shared
// memory, packed in the fragment's column order (mx_xs_word). Every B column holds x, so D's column 0 (lanes
// q = 0) is the dot product; its gate and up sums are rounded to bf16 before the activation, as before.
__device__ __forceinline__ int mx_xs_word(int c) {  // the uint32 (bf16 pair) holding x's column c
  const int r = c % 16;
  return (c / 16) * 8 + (r / 8) * 4 + r % 4;  // pairs (t, t + 4) and (8 + t, 12 + t): device.cuh's pairing
}

__global__ void __launch_bounds__(kGemvThreads) moe_gate_up_mma_mxfp4_kernel(const DecodeParams p) {
  pdl_prologue();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint32_t* xs = reinterpret_cast<uint32_t*>(smem_raw);  // [ceil(Hx / 64) * 32]: x as bf16 pairs
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int i = (blockIdx.x * kGemvWarps + warp) * kMxMmaRows + g;
  const int i_row = min(i, p.I - 1);  // rows past I compute a duplicate that is never stored
  const int n_pairs = p.T * p.k;
  for (int pair = blockIdx.y; pair < n_pairs; pair += gridDim.y) {
    const int t = pair / p.k, j = pair - t * p.k;
    const bf16* x = p.x + int64_t(t) * p.ldx;
    __syncthreads();  // the previous pair's readers of xs are done
    for (int c = threadIdx.x; c < p.Hx; c += kGemvThreads)
      reinterpret_cast<bf16*>(xs)[2 * mx_xs_word(c) + (c % 8) / 4] = x[c];
    __syncthreads();
    const int e = p.ids[int64_t(t) * p.ld_ids + j];
    bf16* h = p.h + int64_t(pair) * p.I;
    if (e < 0 || e >= p.E) {
      if (q == 0 && i < p.I) h[i] = __float2bfloat16_rn(0.0f);
      continue;
    }
    const uint8_t* w_e = p.gu_packed + int64_t(e) * p.gu_expert_stride;
    const uint8_t* s_e = p.gu_scales + int64_t(e) * p.gus_expert_stride;
    // Byte offsets in the expert (32-bit: an expert is < 4 GB, checked on the host).
    const uint32_t gate = uint32_t(i_row * p.gu_ld), up = uint32_t((p.I + i_row) * p.gu_ld);
    const uint32_t gate_s = uint32_t(i_row * p.gus_ld), up_s = uint32_t((p.I + i_row) * p.gus_ld);
    float d0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d1[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // two chains of MMAs
#pragma unroll 2
    for (int c0 = 0; c0 < p.Hx; c0 += kMxMmaStep) {  // the same trip count in every lane (mma is warp-wide)
      const int c = c0 + q * 16;
      uint2 wg = make_uint2(0u, 0u), wu = make_uint2(0u, 0u);  // code 0 is +0: a lane past Hx adds nothing
      uint32_t sg = 127u, su = 127u;
      uint4 xa = make_uint4(0u, 0u, 0u, 0u), xb = xa;
      if (c < p.Hx) {
        wg = *reinterpret_cast<const uint2*>(w_e + gate + c / 2);
        wu = *reinterpret_cast<const uint2*>(w_e + up + c / 2);
        sg = s_e[gate_s + c / 32];
        su = s_e[up_s + c / 32];
        xa = *reinterpret_cast<const uint4*>(xs + (c / 16) * 8);
        xb = *reinterpret_cast<const uint4*>(xs + (c / 16) * 8 + 4);
      }
      const moe::Mxfp4Bf16Scale scg = moe::mxfp4_bf16_scale(sg), scu = moe::mxfp4_bf16_scale(su);
      const uint32_t xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
      for (int k = 0; k < 4;
           ++k) {  // A k-pairs (2q, 2q+1) = columns (k, k + 4), (2q+8, 2q+9) = (8 + k, 12 + k)
        const uint32_t a[4] = {moe::bits_from_bf162(moe::fp4x2_scaled_bf162(wg.x >> (4 * k), scg)),
                               moe::bits_from_bf162(moe::fp4x2_scaled_bf162(wu.x >> (4 * k), scu)),
                               moe::bits_from_bf162(moe::fp4x2_scaled_bf162(wg.y >> (4 * k), scg)),
                               moe::bits_from_bf162(moe::fp4x2_scaled_bf162(wu.y >> (4 * k), scu))};
        mma_bf16(k % 2 ? d1 : d0, a, xw[k], xw[4 + k]);
      }
    }
    if (q == 0 && i < p.I)  // D(g, column 0): the gate row; D(g + 8, column 0): the up row
      h[i] = __float2bfloat16_rn(moe::expert_act(p.act, moe::round_bf16(d0[0] + d1[0]),
                                                 moe::round_bf16(d0[2] + d1[2]), p.beta, p.linear_beta));
  }
}

// The MXFP4 twin of moe_down_gemv_kernel, with kMxDownRows output rows per block (the token's activations are
// re-read by every block: more rows per block, less of that traffic): same per-expert bf16 rounding and
// in-order fp32 combine; lane steps of 16 columns of I (I % 32 == 0), 8 packed bytes per output row.
__global__ void __launch_bounds__(kGemvThreads, kMxDownBlocksPerSm)
    moe_down_gemv_mxfp4_kernel(const DecodeParams p) {
  pdl_prologue();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* part = reinterpret_cast<float*>(smem_raw);  // [k, kMxDownRows]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int o0 = blockIdx.x * kMxDownRows;
  const int n = p.k * p.I;
  for (int t = blockIdx.y; t < p.T; t += gridDim.y) {
    const bf16* hs = p.h + int64_t(t) * n;  // [k, I]: the token's activations, pair order (read through L1)
    __syncthreads();                        // the previous token's readers of part are done
    for (int j = warp; j < p.k; j += kGemvWarps) {
      const int e = p.ids[int64_t(t) * p.ld_ids + j];
      if (e < 0 || e >= p.E) continue;
      const uint8_t* w_e = p.dn_packed + int64_t(e) * p.dn_expert_stride;
      const uint8_t* s_e = p.dn_scales + int64_t(e) * p.dns_expert_stride;
      uint32_t rows[kMxDownRows], srows[kMxDownRows];  // byte offsets in w_e / s_e (as in the gate_up twin)
#pragma unroll
      for (int r = 0; r < kMxDownRows; ++r) {
        const int o = min(o0 + r, p.Hx - 1);
        rows[r] = uint32_t(o * p.dn_ld);
        srows[r] = uint32_t(o * p.dns_ld);
      }
      float s[kMxDownRows];
#pragma unroll
      for (int r = 0; r < kMxDownRows; ++r) s[r] = 0.0f;
      for (int c = lane * kMxStep; c < p.I; c += 32 * kMxStep) {
        uint2 wv[kMxDownRows];
        float sc[kMxDownRows];
#pragma unroll
        for (int r = 0; r < kMxDownRows; ++r) {
          wv[r] = *reinterpret_cast<const uint2*>(w_e + rows[r] + c / 2);
          sc[r] = moe::e8m0(s_e[srows[r] + c / 32]);
        }
        float hv[2][8];
        moe::load_bf16<8>(hs + j * p.I + c, hv[0]);
        moe::load_bf16<8>(hs + j * p.I + c + 8, hv[1]);
#pragma unroll
        for (int r = 0; r < kMxDownRows; ++r) s[r] = fmaf(fp4_dot16(wv[r], hv[0], hv[1]), sc[r], s[r]);
      }
      store_down_rows<kMxDownRows>(s, lane, j, part);
    }
    __syncthreads();
    const int r = threadIdx.x;
    if (r < kMxDownRows && o0 + r < p.Hx)
      p.out[int64_t(t) * p.ldo + o0 + r] = __float2bfloat16_rn(sum_routed_rows<kMxDownRows>(p, t, r, part));
  }
}

// --------------------------------------------------------------------------------------------- grouped path

struct PlanParams {
  const int32_t* ids;  // [T, k]
  int64_t ld_ids;
  int T, k, E;
  int32_t* expert_offsets;  // [E + 1]
  int32_t* tile_offsets;    // [E + 1]: 64-slot tiles (the mma.sync kernels)
  int32_t* wg_tile_offsets;  // [E + 1]: 128-slot tiles (the wgmma kernels; moe/wgmma_schedule.h)
  int32_t* pair_slot;       // [T * k]: slot of pair t*k+j, -1 for an invalid id
  int32_t* slot_token;      // [T * k]: token feeding each slot
  // The multi-CTA plan (plan_ctas(pairs) > 1): CTA b counts and scatters pairs [b * chunk, (b + 1) * chunk);
  // cta_counts[b][e] holds its count of expert e, then (after moe_plan_scan_kernel) the slots of e taken by
  // CTAs before b.
  int chunk;
  int32_t* cta_counts;  // [ctas, E]
};

// The plan's three steps, shared by the one-CTA kernel (small steps: one launch) and the multi-CTA kernels
// (long prompts: at 8K tokens x top-8 one CTA took 78 us a layer, ncu on the H100). The order of pairs inside
// an expert's slots depends on shared-memory atomics, but no result does: each slot's row is computed
// independently and the combine reads slots by pair.

__device__ __forceinline__ int pair_expert(const PlanParams& p, int q) {
  const int t = q / p.k, e = p.ids[int64_t(t) * p.ld_ids + (q - t * p.k)];
  return e >= 0 && e < p.E ? e : -1;
}

// counts[e] += the pairs of [q0, q1) routed to e (shared memory).
__device__ __forceinline__ void count_pairs(const PlanParams& p, int q0, int q1, int* counts) {
  for (int q = q0 + int(threadIdx.x); q < q1; q += int(blockDim.x))
    if (const int e = pair_expert(p, q); e >= 0) atomicAdd(&counts[e], 1);
}

// Each pair of [q0, q1) takes slot first[e] + (its rank among this CTA's pairs of e): fill (shared memory,
// zero on entry) counts them.
__device__ __forceinline__ void scatter_pairs(const PlanParams& p, int q0, int q1, const int* first,
                                              int* fill) {
  for (int q = q0 + int(threadIdx.x); q < q1; q += int(blockDim.x)) {
    const int e = pair_expert(p, q);
    int slot = -1;
    if (e >= 0) {
      slot = first[e] + atomicAdd(&fill[e], 1);
      p.slot_token[slot] = q / p.k;
    }
    p.pair_slot[q] = slot;
  }
}

// From every expert's count (thread e of a kPlanThreads block, 0 past E): the exclusive scans of counts and
// of 64- and 128-slot tiles into the offsets. Returns expert e's first slot.
__device__ __forceinline__ int write_offsets(const PlanParams& p, int count) {
  using Scan = cub::BlockScan<int, kPlanThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  const int tid = int(threadIdx.x);
  const int tiles = (count + moe::kBM - 1) / moe::kBM, wg_tiles = moe::wgmma_tiles(count);
  int offset = 0, tile_offset = 0, wg_tile_offset = 0;
  Scan(scan_tmp).ExclusiveSum(count, offset);
  __syncthreads();
  Scan(scan_tmp).ExclusiveSum(tiles, tile_offset);
  __syncthreads();
  Scan(scan_tmp).ExclusiveSum(wg_tiles, wg_tile_offset);
  if (tid < p.E) {
    p.expert_offsets[tid] = offset;
    p.tile_offsets[tid] = tile_offset;
    p.wg_tile_offsets[tid] = wg_tile_offset;
  }
  if (tid == p.E - 1) {
    p.expert_offsets[p.E] = offset + count;
    p.tile_offsets[p.E] = tile_offset + tiles;
    p.wg_tile_offsets[p.E] = wg_tile_offset + wg_tiles;
  }
  return offset;
}

// One block does it all: count, scan, scatter.
__global__ void __launch_bounds__(kPlanThreads) moe_plan_kernel(const PlanParams p) {
  __shared__ int s_count[moe::kMaxExperts], s_fill[moe::kMaxExperts];
  pdl_prologue();  // the previous layer's combine may still read pair_slot
  const int tid = int(threadIdx.x), n_pairs = p.T * p.k;
  s_count[tid] = 0;
  s_fill[tid] = 0;
  __syncthreads();
  count_pairs(p, 0, n_pairs, s_count);
  __syncthreads();
  const int first = write_offsets(p, tid < p.E ? s_count[tid] : 0);
  __syncthreads();  // every s_count read
  if (tid < p.E) s_count[tid] = first;
  __syncthreads();
  scatter_pairs(p, 0, n_pairs, s_count, s_fill);
}

// Multi-CTA plan, 1 of 3: CTA b's counts per expert.
__global__ void __launch_bounds__(kPlanCtaThreads) moe_plan_count_kernel(const PlanParams p) {
  __shared__ int s_count[moe::kMaxExperts];
  pdl_prologue();
  for (int e = int(threadIdx.x); e < p.E; e += kPlanCtaThreads) s_count[e] = 0;
  __syncthreads();
  const int q0 = int(blockIdx.x) * p.chunk;
  count_pairs(p, q0, min(q0 + p.chunk, p.T * p.k), s_count);
  __syncthreads();
  for (int e = int(threadIdx.x); e < p.E; e += kPlanCtaThreads)
    p.cta_counts[int64_t(blockIdx.x) * p.E + e] = s_count[e];
}

// 2 of 3 (one block, thread e): each CTA's counts become the slots of e taken by the CTAs before it; the
// totals give the offsets.
__global__ void __launch_bounds__(kPlanThreads) moe_plan_scan_kernel(const PlanParams p, int ctas) {
  pdl_prologue();
  const int e = int(threadIdx.x);
  int total = 0;
  if (e < p.E) {
    for (int b = 0; b < ctas; ++b) {
      int32_t& c = p.cta_counts[int64_t(b) * p.E + e];
      const int n = c;
      c = total;
      total += n;
    }
  }
  write_offsets(p, total);
}

// 3 of 3: CTA b's pairs to their slots.
__global__ void __launch_bounds__(kPlanCtaThreads) moe_plan_scatter_kernel(const PlanParams p) {
  __shared__ int s_first[moe::kMaxExperts], s_fill[moe::kMaxExperts];
  pdl_prologue();
  for (int e = int(threadIdx.x); e < p.E; e += kPlanCtaThreads) {
    s_first[e] = p.expert_offsets[e] + p.cta_counts[int64_t(blockIdx.x) * p.E + e];
    s_fill[e] = 0;
  }
  __syncthreads();
  const int q0 = int(blockIdx.x) * p.chunk;
  scatter_pairs(p, q0, min(q0 + p.chunk, p.T * p.k), s_first, s_fill);
}

// out[t] = bf16(sum_j w[t,j] * y[slot(t,j)]) in fp32, j in order; one block per token.
template <int kVec>
__global__ void moe_combine_kernel(const bf16* y, int64_t ldy, const int32_t* pair_slot, const float* weights,
                                   int64_t ld_weights, int k, bf16* out, int64_t ldo, int Hx) {
  const int t = blockIdx.x;
  for (int c = threadIdx.x * kVec; c < Hx; c += blockDim.x * kVec) {
    float acc[kVec];
#pragma unroll
    for (int v = 0; v < kVec; ++v) acc[v] = 0.0f;
    for (int j = 0; j < k; ++j) {
      const int slot = pair_slot[t * k + j];
      if (slot < 0) continue;
      const float wj = weights[int64_t(t) * ld_weights + j];
      float yv[kVec];
      moe::load_bf16<kVec>(y + int64_t(slot) * ldy + c, yv);
#pragma unroll
      for (int v = 0; v < kVec; ++v) acc[v] += wj * yv[v];
    }
    moe::store_bf16<kVec>(out + int64_t(t) * ldo + c, acc);
  }
}

// ------------------------------------------------------------------------------------------------ host side

struct ExpertsPlan {
  bool grouped = false;
  bool mxfp4 = false;   // MXFP4 experts: the MXFP4 twins of the decode or grouped kernels
  bool fp8 = false;     // FP8 experts: the decode GEMVs' Fp8Rows policy or the grouped GEMM's Fp8Tile policy
  bool shared = false;  // the shared expert runs in the bf16 decode GEMVs (as pair T * k + t, slot k)
  int64_t T = 0, k = 0, pairs = 0, E = 0, I = 0, Hx = 0, Is = 0;
  int max_tiles = 0, max_wg_tiles = 0;  // upper bounds of 64- and 128-slot tiles over all experts
  // Scratch pieces (bytes, each 256-aligned), in carving order; `offsets` three times (slots, 64- and
  // 128-slot tiles). The grouped bf16 path sizes h for gate | up ([pairs, 2I], what the cuBLAS path writes;
  // the mma.sync and wgmma kernels use [pairs, I] of it) and keeps room for the cuBLAS path's pointer arrays,
  // so the scratch does not depend on which of the three runs.
  // Grouped FP8 steps also keep the quantised A of moe_wgmma_fp8 (E4M3 [pairs, max(Hx, I)] and F32 scales
  // [max(Hx, I) / 128, pairs]) whatever the option says, so Backend::set_option may flip it between steps.
  // cta_counts: the multi-CTA plan's counts per (CTA, expert), for steps of at least kPlanMultiMinPairs pairs.
  size_t offsets = 0, pair_slot = 0, slot_token = 0, cta_counts = 0, pointers = 0, h = 0, y = 0, codes = 0,
         a_scales = 0, total = 0;
};

bool div8(int64_t v) {
  return v % 8 == 0;
}

// A shared expert the bf16 decode GEMVs can take: dense bf16 with contiguous rows. CudaBackendOptions::
// moe_fuse_shared off runs it as separate ops (the A/B switch of the decode benchmark; cuda_backend.cc).
// The shared expert joins the decode GEMVs in the routed experts' format: bf16 with bf16, FP8 with FP8 (its own
// blocks, whose columns, like the experts', hold whole load chunks of 8 codes).
bool fusable_shared_expert(const backend::MoeExpertsArgs& a) {
  auto rows_ok = [](const backend::LinearWeight* w) {
    return w && w->weight.rank() == 2 && (w->weight.size(1) <= 1 || w->weight.stride(1) == 1);
  };
  auto dense_bf16 = [&](const backend::LinearWeight* w) {
    return rows_ok(w) && w->format == backend::WeightFormat::Dense && w->weight.dtype == DType::BF16;
  };
  auto fp8 = [&](const backend::LinearWeight* w) {
    return rows_ok(w) && w->format == backend::WeightFormat::Fp8 && w->weight.dtype == DType::F8E4M3 &&
           w->scales.dtype == DType::F32 && w->scales.rank() == 2 &&
           (w->scales.size(1) <= 1 || w->scales.stride(1) == 1) && w->block.rows > 0 &&
           (w->block.cols % 8 == 0 || w->block.cols >= w->in_features());
  };
  if (a.experts->format == backend::WeightFormat::Fp8)
    return fp8(a.shared_gate_up) && fp8(a.shared_down) && a.shared_gate_up->block.rows == a.shared_down->block.rows &&
           std::min<int64_t>(a.shared_gate_up->block.cols, backend::Fp8Blocks::kWholeRow) ==
               std::min<int64_t>(a.shared_down->block.cols, backend::Fp8Blocks::kWholeRow);
  return dense_bf16(a.shared_gate_up) && dense_bf16(a.shared_down);
}

// The path and scratch from shapes and strides only (never pointers: a planning pass has none).
ExpertsPlan plan_experts(const backend::MoeExpertsArgs& a) {
  ExpertsPlan s;
  const backend::ExpertWeights& ex = *a.experts;
  s.T = a.x.size(0);
  s.k = a.ids.size(1);
  s.pairs = s.T * s.k;
  s.E = ex.n_experts();
  s.I = ex.intermediate();
  s.Hx = ex.width();
  // The grouped kernels copy 16-byte chunks of rows. MXFP4 experts' strides are in bytes of packed codes
  // (rows of Hx/2 and I/2 bytes; their 16-byte alignment is checked at launch on either path).
  const bool shapes_ok = div8(s.Hx) && div8(s.I) && div8(a.x.stride(0)) && div8(a.out.stride(0)) &&
                         div8(ex.gate_up.stride(0)) && div8(ex.gate_up.stride(1)) &&
                         div8(ex.down.stride(0)) && div8(ex.down.stride(1)) && s.E <= moe::kMaxExperts;
  s.mxfp4 = ex.format == backend::WeightFormat::Mxfp4;
  s.fp8 = ex.format == backend::WeightFormat::Fp8;
  // Sparse MXFP4 steps (K3 decode batches: 896 experts, 16 per token) stay on the GEMVs while pairs <= E/4:
  // the grouped GEMM runs nearly empty 64-slot tiles there, and the GEMVs' re-reading of experts chosen twice
  // costs little (pairs / (E (1 - exp(-pairs/E))) <= 1.13x the bytes). Measured on kimi-k3-slice
  // (2026-12-01, before the integer FP4 decode made both paths faster): batch 8 (128 pairs) 17.9 -> 14.7 ms a
  // step on the GEMVs; batch 32 (512 pairs) 42.1 -> 49.7 ms, so it stays grouped. Not re-measured since.
  const bool sparse_mxfp4 = ex.format == backend::WeightFormat::Mxfp4 && 4 * s.pairs <= s.E;
  // FP8 experts take the grouped GEMM's Fp8Tile policy (grouped_gemm_mxfp4.cu) when its 32-column stages fit:
  // Hx and I multiples of 32, code rows 16-byte aligned, and scale blocks of whole stages (block columns a
  // multiple of 32 or whole rows). Other FP8 shapes stay on the decode GEMVs, which loop over any number of
  // pairs (correct; prefill-sized steps re-read each expert once per pair).
  const int64_t fp8_cols = ex.block.cols;
  const bool fp8_grouped_ok =
      s.fp8 && s.Hx % 32 == 0 && s.I % 32 == 0 && ex.gate_up.stride(0) % 16 == 0 &&
      ex.gate_up.stride(1) % 16 == 0 && ex.down.stride(0) % 16 == 0 && ex.down.stride(1) % 16 == 0 &&
      ex.block.rows > 0 && (fp8_cols % 32 == 0 || (fp8_cols >= s.Hx && fp8_cols >= s.I));
  s.grouped = s.pairs > moe::kDecodeMaxPairs && shapes_ok && !sparse_mxfp4 && (!s.fp8 || fp8_grouped_ok);
  s.shared = fusable_shared_expert(a) && !s.grouped && !s.mxfp4 && s.k > 0 && s.E > 0 &&
             s.T <= kSharedFuseMaxTokens;
  s.Is = s.shared ? a.shared_down->in_features() : 0;
  s.h = align256((size_t(s.pairs) * size_t(s.I) + size_t(s.T) * size_t(s.Is)) * 2);
  if (s.grouped) {
    s.max_tiles = int((s.pairs + moe::kBM - 1) / moe::kBM + std::min(s.E, s.pairs));
    s.max_wg_tiles = int((s.pairs + moe::kWgBM - 1) / moe::kWgBM + std::min(s.E, s.pairs));
    s.offsets = align256(size_t(s.E + 1) * 4);
    s.pair_slot = s.slot_token = align256(size_t(s.pairs) * 4);
    if (const int ctas = plan_ctas(s.pairs); ctas > 1) s.cta_counts = align256(size_t(ctas) * size_t(s.E) * 4);
    s.y = align256(size_t(s.pairs) * size_t(s.Hx) * 2);
    if (!s.mxfp4 && !s.fp8) {  // the cuBLAS grouped path (bf16 experts only)
      s.h = align256(size_t(s.pairs) * size_t(2 * s.I) * 2);
      s.pointers = align256(size_t(6 * s.E) * sizeof(void*));
    }
    if (s.fp8) {
      const size_t k = size_t(std::max(s.Hx, s.I));
      s.codes = align256(size_t(s.pairs) * k);
      s.a_scales = align256((k + 127) / 128 * size_t(s.pairs) * 4);
    }
  }
  s.total = 3 * s.offsets + s.pair_slot + s.slot_token + s.cta_counts + s.pointers + s.h + s.y + s.codes +
            s.a_scales;
  return s;
}

// The decode kernels' parameters shared by the bf16 and MXFP4 variants (weight pointers set by the caller).
DecodeParams decode_params(const backend::MoeExpertsArgs& a, const ExpertsPlan& s, bf16* h) {
  const backend::ExpertWeights& ex = *a.experts;
  DecodeParams p{};
  p.x = static_cast<const bf16*>(a.x.data);
  p.ldx = a.x.stride(0);
  p.ids = a.ids.ptr<const int32_t>();
  p.ld_ids = a.ids.stride(0);
  p.weights = a.weights.ptr<const float>();
  p.ld_weights = a.weights.stride(0);
  p.gu_expert_stride = ex.gate_up.stride(0);
  p.gu_ld = ex.gate_up.stride(1);
  p.dn_expert_stride = ex.down.stride(0);
  p.dn_ld = ex.down.stride(1);
  p.h = h;
  p.out = static_cast<bf16*>(a.out.data);
  p.ldo = a.out.stride(0);
  p.T = int(s.T);
  p.k = int(s.k);
  p.E = int(s.E);
  p.Hx = int(s.Hx);
  p.I = int(s.I);
  if (s.shared) {
    p.sh_gu_ld = a.shared_gate_up->weight.stride(0);
    p.sh_dn_ld = a.shared_down->weight.stride(0);
    p.Is = int(s.Is);
    if (s.fp8) {
      const backend::LinearWeight &gu = *a.shared_gate_up, &dn = *a.shared_down;
      p.sh_gu_fp8 = static_cast<const uint8_t*>(gu.weight.data);
      p.sh_gu_fp8_scales = static_cast<const float*>(gu.scales.data);
      p.sh_gu8s_ld = gu.scales.stride(0);
      p.sh_dn_fp8 = static_cast<const uint8_t*>(dn.weight.data);
      p.sh_dn_fp8_scales = static_cast<const float*>(dn.scales.data);
      p.sh_dn8s_ld = dn.scales.stride(0);
      // One block shape for both shared matrices (checked in run_decode); columns as the experts' (kWholeRow caps).
      p.sh_fp8_block_rows = gu.block.rows;
      p.sh_fp8_block_cols = int(std::min<int64_t>(gu.block.cols, backend::Fp8Blocks::kWholeRow));
    } else {
      p.sh_gate_up = static_cast<const bf16*>(a.shared_gate_up->weight.data);
      p.sh_down = static_cast<const bf16*>(a.shared_down->weight.data);
    }
  }
  p.act = a.activation == backend::Activation::Silu ? Act::Silu : Act::Situ;
  p.beta = a.beta;
  p.linear_beta = a.linear_beta;
  return p;
}

// vec: the weights' load width in elements (16: FP8 codes only; 8; 1: unaligned rows).
template <class W>
Status launch_decode(const DecodeParams& p, const ExpertsPlan& s, int vec, const CudaContext& cx) {
  const size_t x_smem = size_t(s.Hx) * 2, h_smem = size_t(s.k + (s.shared ? 1 : 0)) * kDownRows * 4;
  const int64_t rows_per_block = kGemvWarps * kGateUpRowsPerWarp;
  const dim3 grid1(unsigned((std::max(s.I, s.Is) + rows_per_block - 1) / rows_per_block),
                   unsigned(std::min<int64_t>(s.pairs + (s.shared ? s.T : 0), 65535)));
  const dim3 grid2(unsigned((s.Hx + kDownRows - 1) / kDownRows), unsigned(std::min<int64_t>(s.T, 65535)));
  const unsigned down_threads =
      unsigned(32 * std::clamp<int64_t>(s.k + (s.shared ? 1 : 0), kGemvWarps, kDownMaxThreads / 32));
  auto run = [&](auto gate_up, auto down) -> Status {
    RILL_TRY(opt_in_smem("moe_experts", reinterpret_cast<const void*>(gate_up), x_smem, cx, nullptr));
    RILL_TRY(opt_in_smem("moe_experts", reinterpret_cast<const void*>(down), h_smem, cx, nullptr));
    RILL_TRY(launch("moe_gate_up_gemv", {grid1, dim3(kGemvThreads), x_smem}, cx.stream, gate_up, p));
    return launch("moe_down_gemv", {grid2, dim3(down_threads), h_smem}, cx.stream, down, p);
  };
  if constexpr (W::kFp8)
    if (vec == 16) return run(moe_gate_up_gemv_kernel<16, W>, moe_down_gemv_kernel<16, W>);
  return vec >= 8 ? run(moe_gate_up_gemv_kernel<8, W>, moe_down_gemv_kernel<8, W>)
                  : run(moe_gate_up_gemv_kernel<1, W>, moe_down_gemv_kernel<1, W>);
}

Status run_decode(const backend::MoeExpertsArgs& a, const ExpertsPlan& s, bf16* h, const CudaContext& cx) {
  const backend::ExpertWeights& ex = *a.experts;
  DecodeParams p = decode_params(a, s, h);
  if (s.fp8) {
    p.gu_fp8 = static_cast<const uint8_t*>(ex.gate_up.data);
    p.dn_fp8 = static_cast<const uint8_t*>(ex.down.data);
    p.gu_fp8_scales = static_cast<const float*>(ex.gate_up_scales.data);
    p.gu8s_expert_stride = ex.gate_up_scales.stride(0);
    p.gu8s_ld = ex.gate_up_scales.stride(1);
    p.dn_fp8_scales = static_cast<const float*>(ex.down_scales.data);
    p.dn8s_expert_stride = ex.down_scales.stride(0);
    p.dn8s_ld = ex.down_scales.stride(1);
    p.fp8_block_rows = ex.block.rows;
    p.fp8_block_cols = int(std::min<int64_t>(ex.block.cols, backend::Fp8Blocks::kWholeRow));
    // 8-byte code loads: rows and experts 8 codes apart, 8-byte aligned bases; 16-byte loads: 16 apart, 16-byte
    // aligned, scale blocks a multiple of 16 columns.
    const auto at8 = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 7) == 0; };
    const bool vec = div8(s.Hx) && div8(s.I) && div8(p.ldx) && div8(p.gu_expert_stride) && div8(p.gu_ld) &&
                     div8(p.dn_expert_stride) && div8(p.dn_ld) && aligned16(p.x) && aligned16(h) &&
                     at8(p.gu_fp8) && at8(p.dn_fp8) &&
                     (!s.shared || (div8(s.Is) && div8(p.sh_gu_ld) && div8(p.sh_dn_ld) && at8(p.sh_gu_fp8) &&
                                    at8(p.sh_dn_fp8) && aligned16(h + s.pairs * s.I)));
    const auto div16 = [](int64_t v) { return v % 16 == 0; };
    const bool wide = vec && div16(s.Hx) && div16(s.I) && div16(p.gu_expert_stride) && div16(p.gu_ld) &&
                      div16(p.dn_expert_stride) && div16(p.dn_ld) && aligned16(p.gu_fp8) && aligned16(p.dn_fp8) &&
                      p.fp8_block_cols % 16 == 0 &&
                      (!s.shared || (div16(s.Is) && div16(p.sh_gu_ld) && div16(p.sh_dn_ld) &&
                                     aligned16(p.sh_gu_fp8) && aligned16(p.sh_dn_fp8) && p.sh_fp8_block_cols % 16 == 0));
    return launch_decode<Fp8Rows>(p, s, wide ? 16 : vec ? 8 : 1, cx);
  }
  p.gate_up = static_cast<const bf16*>(ex.gate_up.data);
  p.down = static_cast<const bf16*>(ex.down.data);
  const bool vec =
      div8(s.Hx) && div8(s.I) && div8(p.ldx) && div8(p.gu_expert_stride) && div8(p.gu_ld) &&
      div8(p.dn_expert_stride) && div8(p.dn_ld) && aligned16(p.x) && aligned16(p.gate_up) &&
      aligned16(p.down) && aligned16(h) &&
      (!s.shared || (div8(s.Is) && div8(p.sh_gu_ld) && div8(p.sh_dn_ld) && aligned16(p.sh_gate_up) &&
                     aligned16(p.sh_down) && aligned16(h + s.pairs * s.I)));
  return launch_decode<Bf16Rows>(p, s, vec ? 8 : 1, cx);
}

// Both MXFP4 paths read packed rows in 16-byte pieces.
Status check_mxfp4_alignment(const backend::ExpertWeights& ex) {
  if (ex.gate_up.stride(0) % 16 != 0 || ex.gate_up.stride(1) % 16 != 0 || ex.down.stride(0) % 16 != 0 ||
      ex.down.stride(1) % 16 != 0 || !aligned16(ex.gate_up.data) || !aligned16(ex.down.data))
    return invalid_argument(
        "moe_experts: MXFP4 packed expert rows must be 16-byte aligned (gate_up {}, down {})",
        ex.gate_up.describe(), ex.down.describe());
  // The GEMVs address an expert's rows by 32-bit byte offsets.
  if (ex.gate_up.stride(0) > int64_t(UINT32_MAX) || ex.down.stride(0) > int64_t(UINT32_MAX))
    return invalid_argument("moe_experts: an MXFP4 expert must be under 4 GiB (gate_up {}, down {})",
                            ex.gate_up.describe(), ex.down.describe());
  return {};
}

// MXFP4 experts, decode path: the packed bytes and E8M0 scales are read in place (16-byte loads of packed
// rows).
Status run_decode_mxfp4(const backend::MoeExpertsArgs& a, const ExpertsPlan& s, bf16* h,
                        const CudaContext& cx) {
  const backend::ExpertWeights& ex = *a.experts;
  DecodeParams p = decode_params(a, s, h);
  p.gu_packed = static_cast<const uint8_t*>(ex.gate_up.data);
  p.gu_scales = static_cast<const uint8_t*>(ex.gate_up_scales.data);
  p.gus_expert_stride = ex.gate_up_scales.stride(0);
  p.gus_ld = ex.gate_up_scales.stride(1);
  p.dn_packed = static_cast<const uint8_t*>(ex.down.data);
  p.dn_scales = static_cast<const uint8_t*>(ex.down_scales.data);
  p.dns_expert_stride = ex.down_scales.stride(0);
  p.dns_ld = ex.down_scales.stride(1);
  RILL_TRY(check_mxfp4_alignment(ex));
  const size_t x_smem = size_t((s.Hx + kMxMmaStep - 1) / kMxMmaStep) * kMxMmaStep * 2,  // bf16, mx_xs_word
      h_smem = size_t(s.k) * kMxDownRows * 4;
  const dim3 grid1(unsigned((s.I + kGemvWarps * kMxMmaRows - 1) / (kGemvWarps * kMxMmaRows)),
                   unsigned(std::min<int64_t>(s.pairs, 65535)));
  const dim3 grid2(unsigned((s.Hx + kMxDownRows - 1) / kMxDownRows), unsigned(std::min<int64_t>(s.T, 65535)));
  RILL_TRY(opt_in_smem("moe_experts", reinterpret_cast<const void*>(moe_gate_up_mma_mxfp4_kernel), x_smem, cx,
                       nullptr));
  RILL_TRY(
      opt_in_smem("moe_experts", reinterpret_cast<const void*>(moe_down_gemv_mxfp4_kernel), h_smem, cx, nullptr));
  RILL_TRY(launch("moe_gate_up_mma_mxfp4", {grid1, dim3(kGemvThreads), x_smem}, cx.stream,
                  moe_gate_up_mma_mxfp4_kernel, p));
  RILL_TRY(launch("moe_down_gemv_mxfp4", {grid2, dim3(kGemvThreads), h_smem}, cx.stream,
                  moe_down_gemv_mxfp4_kernel, p));
  return {};
}

Status launch_combine(const backend::MoeExpertsArgs& a, const ExpertsPlan& s, const bf16* y,
                      const int32_t* pair_slot, const CudaContext& cx) {
  moe_combine_kernel<8><<<unsigned(s.T), 256, 0, cx.stream>>>(
      y, s.Hx, pair_slot, a.weights.ptr<const float>(), a.weights.stride(0), int(s.k),
      static_cast<bf16*>(a.out.data), a.out.stride(0), int(s.Hx));
  RILL_CUDA_CHECK_LAUNCH("moe_combine");
  return {};
}

Status run_grouped(const backend::MoeExpertsArgs& a, const ExpertsPlan& s, char* scratch,
                   const CudaContext& cx) {
  const backend::ExpertWeights& ex = *a.experts;
  if (!aligned16(a.x.data) || !aligned16(a.out.data) || !aligned16(ex.gate_up.data) ||
      !aligned16(ex.down.data))
    return invalid_argument("moe_experts: x, out and the expert weights must be 16-byte aligned");
  if (s.mxfp4) RILL_TRY(check_mxfp4_alignment(ex));
  // MXFP4: U8 packed experts and their E8M0 scales (strides in bytes); bf16: the weights themselves.
  auto set_weights = [&](GroupedGemmParams& g, const TensorView& w, const TensorView& scales) {
    g.w_expert_stride = w.stride(0);
    g.ldw = w.stride(1);
    if (s.mxfp4) {
      g.w = nullptr;
      g.w_packed = static_cast<const uint8_t*>(w.data);
      g.w_scales = static_cast<const uint8_t*>(scales.data);
      g.s_expert_stride = scales.stride(0);
      g.lds = scales.stride(1);
    } else if (s.fp8) {
      g.w = nullptr;
      g.w_packed = static_cast<const uint8_t*>(w.data);
      g.w_fp8_scales = static_cast<const float*>(scales.data);
      g.s_expert_stride = scales.stride(0);
      g.lds = scales.stride(1);
      g.fp8_block_rows = ex.block.rows;
      // Stages of 32 columns per scale block; per-channel (one block per row): every stage reads scale 0.
      const int64_t cols = ex.block.cols;
      g.fp8_stages_per_block = cols >= int64_t(g.k) ? (1 << 30) : int(cols / moe::kBK);
    } else {
      g.w = static_cast<const bf16*>(w.data);
    }
  };
  auto take = [&](size_t bytes) {
    char* q = scratch;
    scratch += bytes;
    return q;
  };
  PlanParams pl;
  pl.ids = a.ids.ptr<const int32_t>();
  pl.ld_ids = a.ids.stride(0);
  pl.T = int(s.T);
  pl.k = int(s.k);
  pl.E = int(s.E);
  pl.expert_offsets = reinterpret_cast<int32_t*>(take(s.offsets));
  pl.tile_offsets = reinterpret_cast<int32_t*>(take(s.offsets));
  pl.wg_tile_offsets = reinterpret_cast<int32_t*>(take(s.offsets));
  pl.pair_slot = reinterpret_cast<int32_t*>(take(s.pair_slot));
  pl.slot_token = reinterpret_cast<int32_t*>(take(s.slot_token));
  pl.cta_counts = reinterpret_cast<int32_t*>(take(s.cta_counts));
  void** pointers = reinterpret_cast<void**>(take(s.pointers));
  bf16* h = reinterpret_cast<bf16*>(take(s.h));
  bf16* y = reinterpret_cast<bf16*>(take(s.y));
  uint8_t* codes = reinterpret_cast<uint8_t*>(take(s.codes));
  float* a_scales = reinterpret_cast<float*>(take(s.a_scales));
  if (const int ctas = plan_ctas(s.pairs); ctas == 1) {
    RILL_TRY(launch("moe_plan", {dim3(1), dim3(kPlanThreads), 0}, cx.stream, moe_plan_kernel, pl));
  } else {
    pl.chunk = plan_chunk(s.pairs, ctas);
    RILL_TRY(launch("moe_plan_count", {dim3(unsigned(ctas)), dim3(kPlanCtaThreads), 0}, cx.stream,
                    moe_plan_count_kernel, pl));
    RILL_TRY(
        launch("moe_plan_scan", {dim3(1), dim3(kPlanThreads), 0}, cx.stream, moe_plan_scan_kernel, pl, ctas));
    RILL_TRY(launch("moe_plan_scatter", {dim3(unsigned(ctas)), dim3(kPlanCtaThreads), 0}, cx.stream,
                    moe_plan_scatter_kernel, pl));
  }

  if (!s.mxfp4 && !s.fp8 && cx.options.moe_wgmma) {  // Hopper's TMA + wgmma kernels, graph captures too
    moe::WgmmaExpertsArgs w{&a, int(s.E), int(s.I), int(s.Hx), s.pairs, s.max_wg_tiles};
    w.expert_offsets = pl.expert_offsets;
    w.tile_offsets = pl.wg_tile_offsets;
    w.slot_token = pl.slot_token;
    w.xy = y;
    w.h = h;
    if (moe::wgmma_experts_supported(w, cx)) {
      RILL_TRY(moe::run_expert_gemms_wgmma(w, cx));
      return launch_combine(a, s, y, pl.pair_slot, cx);
    }
  }
  // FP8 operands on Hopper's wgmma (128 x 128 or per-channel scales)
  if (s.fp8 && cx.options.moe_wgmma_fp8) {
    moe::WgmmaExpertsArgs w{&a, int(s.E), int(s.I), int(s.Hx), s.pairs, s.max_wg_tiles};
    w.expert_offsets = pl.expert_offsets;
    w.tile_offsets = pl.wg_tile_offsets;
    w.slot_token = pl.slot_token;
    w.xy = y;
    w.h = h;
    w.codes = codes;
    w.a_scales = a_scales;
    if (moe::wgmma_fp8_experts_supported(w, cx)) {
      RILL_TRY(moe::run_expert_gemms_wgmma_fp8(w, cx));
      return launch_combine(a, s, y, pl.pair_slot, cx);
    }
  }
  // MXFP4 codes dequantised in shared memory, bf16 wgmma (steps large enough to pay, options)
  if (s.mxfp4 && cx.options.moe_wgmma_mxfp4 && s.pairs >= cx.options.moe_wgmma_mxfp4_min_pairs) {
    moe::WgmmaExpertsArgs w{&a, int(s.E), int(s.I), int(s.Hx), s.pairs, s.max_wg_tiles};
    w.expert_offsets = pl.expert_offsets;
    w.tile_offsets = pl.wg_tile_offsets;
    w.slot_token = pl.slot_token;
    w.xy = y;
    w.h = h;
    if (moe::wgmma_mxfp4_experts_supported(w, cx)) {
      RILL_TRY(moe::run_expert_gemms_wgmma_mxfp4(w, cx));
      return launch_combine(a, s, y, pl.pair_slot, cx);
    }
  }
  bool cublas = !s.mxfp4 && !s.fp8 && cx.moe_grouped_gemm != nullptr && cx.options.moe_cublas_grouped &&
                s.pairs >= cx.options.moe_cublas_min_pairs;
  if (cublas) {  // it reads the slot counts back to the host: not inside a graph capture
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    RILL_CUDA_CHECK(cudaStreamIsCapturing(cx.stream, &capture));
    cublas = capture == cudaStreamCaptureStatusNone;
  }
  if (cublas) {
    const moe::CublasExpertsArgs c{&a, int(s.E), int(s.I), int(s.Hx), s.pairs, pl.expert_offsets,
                                   pl.slot_token, y, h, pointers};
    RILL_TRY(moe::run_expert_gemms_cublas(c, cx));
    return launch_combine(a, s, y, pl.pair_slot, cx);
  }

  GroupedGemmParams g{};
  g.a = static_cast<const bf16*>(a.x.data);
  g.lda = a.x.stride(0);
  g.slot_row = pl.slot_token;
  g.k = int(s.Hx);
  set_weights(g, ex.gate_up, ex.gate_up_scales);
  g.expert_offsets = pl.expert_offsets;
  g.tile_offsets = pl.tile_offsets;
  g.n_experts = int(s.E);
  g.n = int(s.I);
  g.out = h;
  g.ldo = s.I;
  g.act = a.activation == backend::Activation::Silu ? Act::Silu : Act::Situ;
  g.beta = a.beta;
  g.linear_beta = a.linear_beta;
  RILL_TRY(s.mxfp4 ? moe::launch_grouped_gate_up_mxfp4(g, s.max_tiles, cx.stream)
           : s.fp8 ? moe::launch_grouped_gate_up_fp8(g, s.max_tiles, cx.stream)
                   : moe::launch_grouped_gate_up(g, s.max_tiles, cx.stream));

  g.a = h;
  g.lda = s.I;
  g.slot_row = nullptr;
  g.k = int(s.I);
  set_weights(g, ex.down, ex.down_scales);
  g.n = int(s.Hx);
  g.out = y;
  g.ldo = s.Hx;
  RILL_TRY(s.mxfp4 ? moe::launch_grouped_down_mxfp4(g, s.max_tiles, cx.stream)
           : s.fp8 ? moe::launch_grouped_down_fp8(g, s.max_tiles, cx.stream)
                   : moe::launch_grouped_down(g, s.max_tiles, cx.stream));

  return launch_combine(a, s, y, pl.pair_slot, cx);
}

// MXFP4 experts (spec §2.4): U8 packed [E, 2I, Hx/2] and [E, Hx, I/2], U8 E8M0 scales [E, 2I, Hx/32] and
// [E, Hx, I/32]; the kernels take whole 32-column groups, so Hx and I must be multiples of 32.
Status check_mxfp4_experts(const backend::ExpertWeights& ex) {
  for (const TensorView* v : {&ex.gate_up, &ex.gate_up_scales, &ex.down, &ex.down_scales})
    if (v->dtype != DType::U8 || v->rank() != 3 || v->stride(2) != 1)
      return invalid_argument(
          "moe_experts: MXFP4 expert tensors must be U8 [E, rows, cols] with contiguous rows, "
          "got {}",
          v->describe());
  const int64_t E = ex.gate_up.size(0), I = ex.gate_up.size(1) / 2, Hx = ex.down.size(1);
  if (Hx % 32 != 0 || I % 32 != 0)
    return invalid_argument("moe_experts: MXFP4 expert widths must be multiples of 32 (Hx {}, I {})", Hx, I);
  auto is = [](const TensorView& v, int64_t a, int64_t b, int64_t c) {
    return v.size(0) == a && v.size(1) == b && v.size(2) == c;
  };
  if (!is(ex.gate_up, E, 2 * I, Hx / 2) || !is(ex.gate_up_scales, E, 2 * I, Hx / 32) ||
      !is(ex.down, E, Hx, I / 2) || !is(ex.down_scales, E, Hx, I / 32))
    return invalid_argument(
        "moe_experts: MXFP4 expert shapes gate_up {} (scales {}) and down {} (scales {}) "
        "do not match",
        ex.gate_up.describe(), ex.gate_up_scales.describe(), ex.down.describe(), ex.down_scales.describe());
  return {};
}

// FP8 experts: E4M3 codes [E, 2I, Hx] / [E, Hx, I] with F32 block scales whose blocks never span gate and up and
// whose columns are whole 8-code chunks (the decode GEMVs' loads).
Status check_fp8_experts(const backend::ExpertWeights& ex) {
  const backend::Fp8Blocks b = ex.block;
  const int64_t I = ex.down.size(2), Hx = ex.down.size(1);
  const bool ok = ex.gate_up.dtype == DType::F8E4M3 && ex.down.dtype == DType::F8E4M3 &&
                  ex.gate_up_scales.dtype == DType::F32 && ex.down_scales.dtype == DType::F32 && b.rows > 0 &&
                  I % b.rows == 0 && (b.cols % 8 == 0 || (b.cols >= Hx && b.cols >= I)) &&
                  ex.gate_up.rank() == 3 && ex.gate_up.size(1) == 2 * I && ex.gate_up.size(2) == Hx &&
                  ex.gate_up_scales.rank() == 3 && ex.gate_up_scales.size(1) == b.scale_rows(2 * I) &&
                  ex.gate_up_scales.size(2) == b.scale_cols(Hx) && ex.down_scales.rank() == 3 &&
                  ex.down_scales.size(1) == b.scale_rows(Hx) && ex.down_scales.size(2) == b.scale_cols(I) &&
                  ex.gate_up.stride(2) == 1 && ex.down.stride(2) == 1 && ex.gate_up_scales.stride(2) == 1 &&
                  ex.down_scales.stride(2) == 1;
  if (!ok)
    return invalid_argument("moe_experts: FP8 experts gate_up {} (scales {}) and down {} (scales {}) in blocks of "
                            "{} x {} do not match (or block rows do not divide I, or block columns are not a "
                            "multiple of 8)",
                            ex.gate_up.describe(), ex.gate_up_scales.describe(), ex.down.describe(),
                            ex.down_scales.describe(), b.rows, b.cols);
  return {};
}

Status check_experts(const backend::MoeExpertsArgs& a) {
  const backend::ExpertWeights& ex = *a.experts;
  if (a.x.dtype != DType::BF16 || a.out.dtype != DType::BF16)
    return invalid_argument("moe_experts: CUDA activations must be BF16 (x {}, out {})", a.x.describe(),
                            a.out.describe());
  if (a.weights.dtype != DType::F32)
    return invalid_argument("moe_experts: weights must be F32, got {}", a.weights.describe());
  if (ex.format == backend::WeightFormat::Mxfp4) return check_mxfp4_experts(ex);
  if (ex.format == backend::WeightFormat::Fp8) return check_fp8_experts(ex);
  if (ex.gate_up.dtype != DType::BF16 || ex.down.dtype != DType::BF16)
    return invalid_argument("moe_experts: CUDA expert weights must be BF16 (gate_up {}, down {})",
                            ex.gate_up.describe(), ex.down.describe());
  if (ex.gate_up.rank() != 3 || ex.down.rank() != 3 || ex.gate_up.size(1) != 2 * ex.down.size(2) ||
      ex.gate_up.size(2) != ex.down.size(1) || ex.down.size(0) != ex.gate_up.size(0))
    return invalid_argument("moe_experts: expert shapes gate_up {} and down {} do not match",
                            ex.gate_up.describe(), ex.down.describe());
  if (ex.gate_up.stride(2) != 1 || ex.down.stride(2) != 1)
    return invalid_argument("moe_experts: expert weight rows must be contiguous");
  return {};
}

}  // namespace

bool moe_wgmma_available(const CudaContext& cx) {
  return moe::wgmma_device_supported(cx);
}

bool moe_fuses_shared_expert(const backend::MoeExpertsArgs& a) {
  if (!a.experts || a.x.rank() != 2 || a.ids.rank() != 2) return false;
  return plan_experts(a).shared;
}

size_t moe_experts_scratch_bytes(const backend::MoeExpertsArgs& a) {
  if (!a.experts || a.x.rank() != 2 || a.ids.rank() != 2) return 0;
  return plan_experts(a).total;
}

Status launch_moe_experts(const backend::MoeExpertsArgs& a, const CudaContext& cx) {
  RILL_TRY(check_experts(a));
  const ExpertsPlan s = plan_experts(a);
  if (s.T == 0) return {};
  if (s.k == 0 || s.E == 0) {  // nothing routed: the sum is empty
    RILL_CUDA_CHECK(cudaMemset2DAsync(a.out.data, size_t(a.out.stride(0)) * 2, 0, size_t(s.Hx) * 2,
                                      size_t(s.T), cx.stream));
    return {};
  }
  if (!a.scratch)
    return internal_error("moe_experts: needs {} scratch bytes but has no scratch arena", s.total);
  const size_t mark = a.scratch->used();
  char* scratch = static_cast<char*>(a.scratch->alloc(DType::U8, {int64_t(s.total)}).data);
  // Later work on the stream is ordered after these kernels, so the scratch can go back to the arena now.
  a.scratch->release_to(mark);
  if (s.grouped) return run_grouped(a, s, scratch, cx);
  if (s.mxfp4) return run_decode_mxfp4(a, s, reinterpret_cast<bf16*>(scratch), cx);
  return run_decode(a, s, reinterpret_cast<bf16*>(scratch), cx);
}

}  // namespace rill::cuda
