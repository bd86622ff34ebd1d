// Grouped expert GEMMs on quantised experts for the prefill path, one kernel body with a weight policy per
// format (style §7.10): Mxfp4Tile (spec §2.4, below) and Fp8Tile (issue #35: E4M3 codes, F32 scales per block
// of rows x (a multiple of 32 columns, or whole rows); 32 code bytes per row and stage, two cp.async each,
// dequantised as bf16(float(code) * scale), one rounding of the exact fp32 product, as the FP8 GEMVs' fp32
// weight rounded to bf16). The MXFP4 notes below hold for both; only the stage's bytes and scale differ.
//
// MXFP4: the twin of grouped_gemm.cu
// (same plan, grid, 64 x 128 x 32 tiles, warp layout, mma.sync m16n8k16 and epilogues), except for how the
// weight (B) tile reaches the tensor cores. The experts are read in place; no bf16 copy exists in global
// memory.
//
// Per 32-k stage a B row is exactly one scale group: 16 packed bytes (32 FP4 codes, low nibble = even
// column) and one E8M0 scale byte.
//  - The packed bytes of the 128 rows go into a 3-stage shared ring by cp.async (threads 0-127, one 16-byte
//    copy each, zero-filled for rows past n), in the same commit groups as the A (activation) tile.
//  - The scale bytes cannot use cp.async (a lone byte; cp.async copies 4, 8 or 16 aligned bytes), so threads
//    128-255 load the scale of stage kt + 2 into a register when issuing that stage's copies and store it
//    into a 3-stage shared ring after this step's MMAs, by which time the load has landed.
//  - Before the MMAs of stage kt, all 256 threads dequantise it (16 columns each) into one bf16 tile with the
//    bf16 kernel's padded layout: fp4(code) * 2^(s - 127), built in bf16 with integer ops and two bf16
//    multiplies, exact (both factors have short mantissas; s = 0 gives bf16 subnormals, s = 255 NaN, the
//    values of the CPU's float dequant).
//    A barrier, then ldmatrix + mma.sync read it exactly as in the bf16 kernel.
// The products of bf16 activations and the exact weights are exact in fp32, so against the CPU (which
// dequantises rows to fp32 and sums in fp32) only the summation order and the bf16 rounding points differ.
//
// Measured on an H200 (kernel_lab, K3's 3584 x 3072 experts, 32 of them, top-8): 148 and 183 TFLOP/s at
// T = 256 and 2048 (the bf16 kernel: 217 at Kimi Linear's shapes). The first version decoded each code with
// float ops and branches (~20 instructions per packed byte: 98 and 120 TFLOP/s); the integer decode of
// device.cuh made it 1.5x faster. ncu now finds the L1 / shared-memory pipe ~80% busy (cp.async in, the
// dequantised tile out and back through ldmatrix). Next: dequantise straight into the mma B fragments (a
// thread's fragment needs bytes (lane % 4) and (lane % 4) + 4 of each 8-byte group of its row), skipping the
// bf16 tile and its second barrier; 32-slot tiles (or the GEMVs) when experts get few slots; then wgmma with
// warp-specialised producers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda/common/check.h"
#include "backend/cuda/moe/grouped_tile.cuh"
#include "backend/cuda/moe/params.h"

namespace rill::cuda::moe {
namespace {

// Weight policies: kRowBytes code bytes per B row and 32-k stage (whole 16-byte cp.async chunks), the scale
// type (kOne for padding rows, whose codes are zero-filled), where a row's scales start and which one a stage
// uses, and the dequantisation of 16 columns (kRowBytes / 2 code bytes at `q`) to bf16.
struct Mxfp4Tile {
  static constexpr int kRowBytes = kMxRowBytes;
  using Scale = uint8_t;
  static constexpr Scale kOne = 127;  // E8M0 of 1.0
  __device__ __forceinline__ static const Scale* scale_row(const GroupedGemmParams& p, int e, int row) {
    return p.w_scales + int64_t(e) * p.s_expert_stride + int64_t(row) * p.lds;
  }
  __device__ __forceinline__ static int scale_index(const GroupedGemmParams&, int kt) { return kt; }
  // 16 columns of one B row: 8 packed bytes (low nibble = even column) and the row's scale, to 16 bf16
  // (device.cuh mxfp4_dequant16; the one-multiply form of fp4x2_scaled_bf162 measured ~2.5% slower here, its
  // branch costing more than the multiply).
  __device__ __forceinline__ static void dequant16(const uint8_t* q_smem, Scale s, bf16* dst) {
    uint32_t out[8];
    mxfp4_dequant16(*reinterpret_cast<const uint2*>(q_smem), e8m0_bf162(s), out);
    reinterpret_cast<uint4*>(dst)[0] = make_uint4(out[0], out[1], out[2], out[3]);
    reinterpret_cast<uint4*>(dst)[1] = make_uint4(out[4], out[5], out[6], out[7]);
  }
};

// FP8 E4M3 codes (one byte per column) and F32 scales [E, rows / fp8_block_rows, k blocks] (strides
// s_expert_stride / lds in floats); a stage of 32 columns lies in one column block (fp8_stages_per_block
// stages each; per-channel scales: one block spans the row).
struct Fp8Tile {
  static constexpr int kRowBytes = kBK;
  using Scale = float;
  static constexpr float kOne = 1.0f;
  __device__ __forceinline__ static const Scale* scale_row(const GroupedGemmParams& p, int e, int row) {
    return p.w_fp8_scales + int64_t(e) * p.s_expert_stride + int64_t(row / p.fp8_block_rows) * p.lds;
  }
  __device__ __forceinline__ static int scale_index(const GroupedGemmParams& p, int kt) {
    return kt / p.fp8_stages_per_block;
  }
  // 16 codes (column order) to fp32 through the hardware E4M3x2 -> f16x2 conversion (exact), times the scale
  // in fp32, rounded once to bf16.
  __device__ __forceinline__ static void dequant16(const uint8_t* q_smem, Scale s, bf16* dst) {
    const uint4 q = *reinterpret_cast<const uint4*>(q_smem);
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
    uint32_t out[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const __nv_fp8x2_storage_t pair = __nv_fp8x2_storage_t(words[k] >> (16 * h));
        const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
        const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * s, f.y * s);
        out[2 * k + h] = bits_from_bf162(b);
      }
    }
    reinterpret_cast<uint4*>(dst)[0] = make_uint4(out[0], out[1], out[2], out[3]);
    reinterpret_cast<uint4*>(dst)[1] = make_uint4(out[4], out[5], out[6], out[7]);
  }
};

template <class W, bool kGateUp>
__global__ void __launch_bounds__(kGemmThreads) grouped_gemm_dequant_kernel(const GroupedGemmParams p) {
  using Scale = typename W::Scale;
  constexpr int kChunks = W::kRowBytes / 16;  // cp.async chunks per B row and stage
  __shared__ __align__(16) bf16 As[kStages][kBM][kLds];
  __shared__ __align__(16) uint8_t Bq[kStages][kBN][W::kRowBytes];  // codes of each stage
  __shared__ Scale Bsc[kStages][kBN];                               // the rows' scales of each stage
  __shared__ __align__(16) bf16 Bs[kBN][kLds];                      // the stage being multiplied, in bf16
  GroupedTile t;
  if (!locate_tile(p, blockIdx.y, t)) return;
  const int n0 = blockIdx.x * (kGateUp ? kGateUpCols : kBN);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 1, wn = warp >> 1;
  // A loader as in the bf16 kernel: 64 rows x 4 chunks of 8 bf16, one chunk per thread (K % 32 == 0: no
  // k tail). B loader: row tid % 128; threads below 128 copy its code bytes, the others load its scale.
  const int ld_row = tid >> 2, ld_col = (tid & 3) * 8;
  const bf16* a_src = a_tile_row(p, t, ld_row);
  const int b_row = tid & (kBN - 1);
  const bool b_packed_loader = tid < kBN;
  int b_col;
  const int src_row = b_tile_row<kGateUp>(b_row, n0, p.n, b_col);
  const bool b_valid = b_col < p.n;
  const uint8_t* bq_src =
      b_valid ? p.w_packed + int64_t(t.e) * p.w_expert_stride + int64_t(src_row) * p.ldw : nullptr;
  const Scale* bs_src = b_valid ? W::scale_row(p, t.e, src_row) : nullptr;
  auto load_stage = [&](int stage, int kt) {
    cp_async16(&As[stage][ld_row][ld_col], a_src ? a_src + kt * kBK + ld_col : p.a, a_src != nullptr);
    if (b_packed_loader)
#pragma unroll
      for (int c = 0; c < kChunks; ++c)
        cp_async16(&Bq[stage][b_row][16 * c], bq_src ? bq_src + kt * W::kRowBytes + 16 * c : p.w_packed,
                   bq_src != nullptr);
  };
  auto load_scale = [&](int kt) -> Scale { return bs_src ? bs_src[W::scale_index(p, kt)] : W::kOne; };

  GroupedAcc acc;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;

  const int k_tiles = p.k / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) {
      load_stage(s, s);
      if (!b_packed_loader) Bsc[s][b_row] = load_scale(s);  // visible after the first loop barrier
    }
    cp_async_commit();  // empty groups keep the group count uniform
  }
  // The dequant split: row tid / 2, columns (tid % 2) * 16 .. + 16 of the 32-k stage.
  const int dq_row = tid >> 1, dq_half = tid & 1;
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();  // stage kt has landed (for this thread) ...
    __syncthreads();               // ... for all threads; the stage refilled below and Bs are no longer read
    const int next = kt + kStages - 1;
    const bool has_next = next < k_tiles;
    if (has_next) load_stage(next % kStages, next);
    cp_async_commit();
    // Issued now, stored after the MMAs: the load's latency hides behind them.
    const Scale next_scale = has_next && !b_packed_loader ? load_scale(next) : W::kOne;
    const int st = kt % kStages;
    W::dequant16(&Bq[st][dq_row][dq_half * (W::kRowBytes / 2)], Bsc[st][dq_row], &Bs[dq_row][dq_half * 16]);
    __syncthreads();  // Bs is complete
    mma_k_tile(acc, As[st], Bs, wm, wn, lane);
    // Stage `next` was last read by the dequant of step kt - 1, before this step's first barrier; it is
    // read next by the dequant of step `next`, after two more barriers.
    if (has_next && !b_packed_loader) Bsc[next % kStages][b_row] = next_scale;
  }
  cp_async_wait<0>();
  store_grouped_tile<kGateUp>(p, t, n0, acc, wm, wn, lane);
}

Status check_dequant_params(const GroupedGemmParams& p, const char* name) {
  if (p.k % kBK != 0 || p.ldw % 16 != 0 || p.w_expert_stride % 16 != 0)
    return invalid_argument(
        "{}: needs K % {} == 0 and 16-byte aligned code rows (K {}, rows {} B, experts {} B apart)", name, kBK,
        p.k, p.ldw, p.w_expert_stride);
  return {};
}

Status check_fp8_params(const GroupedGemmParams& p, const char* name) {
  RILL_TRY(check_dequant_params(p, name));
  if (p.fp8_block_rows <= 0 || p.fp8_stages_per_block <= 0)
    return invalid_argument("{}: FP8 scale blocks of {} rows, {} stages of {} columns", name, p.fp8_block_rows,
                            p.fp8_stages_per_block, kBK);
  return {};
}

template <class W, bool kGateUp>
Status launch_dequant(const GroupedGemmParams& p, int max_tiles, cudaStream_t stream, const char* name) {
  const int cols = kGateUp ? kGateUpCols : kBN;
  const dim3 grid(unsigned((p.n + cols - 1) / cols), unsigned(max_tiles));
  grouped_gemm_dequant_kernel<W, kGateUp><<<grid, kGemmThreads, 0, stream>>>(p);
  RILL_CUDA_CHECK_LAUNCH(name);
  return {};
}

}  // namespace

Status launch_grouped_gate_up_mxfp4(const GroupedGemmParams& p, int max_tiles, cudaStream_t stream) {
  if (max_tiles <= 0 || p.n <= 0) return {};
  RILL_TRY(check_dequant_params(p, "moe_grouped_gate_up_mxfp4"));
  return launch_dequant<Mxfp4Tile, true>(p, max_tiles, stream, "moe_grouped_gate_up_mxfp4");
}

Status launch_grouped_down_mxfp4(const GroupedGemmParams& p, int max_tiles, cudaStream_t stream) {
  if (max_tiles <= 0 || p.n <= 0) return {};
  RILL_TRY(check_dequant_params(p, "moe_grouped_down_mxfp4"));
  return launch_dequant<Mxfp4Tile, false>(p, max_tiles, stream, "moe_grouped_down_mxfp4");
}

Status launch_grouped_gate_up_fp8(const GroupedGemmParams& p, int max_tiles, cudaStream_t stream) {
  if (max_tiles <= 0 || p.n <= 0) return {};
  RILL_TRY(check_fp8_params(p, "moe_grouped_gate_up_fp8"));
  return launch_dequant<Fp8Tile, true>(p, max_tiles, stream, "moe_grouped_gate_up_fp8");
}

Status launch_grouped_down_fp8(const GroupedGemmParams& p, int max_tiles, cudaStream_t stream) {
  if (max_tiles <= 0 || p.n <= 0) return {};
  RILL_TRY(check_fp8_params(p, "moe_grouped_down_fp8"));
  return launch_dequant<Fp8Tile, false>(p, max_tiles, stream, "moe_grouped_down_fp8");
}

}  // namespace rill::cuda::moe
