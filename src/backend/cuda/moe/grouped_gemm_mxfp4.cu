// Grouped expert GEMMs on MXFP4 experts (spec §2.4) for the prefill path: the twin of grouped_gemm.cu
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

#include "backend/cuda/common/check.h"
#include "backend/cuda/moe/grouped_tile.cuh"
#include "backend/cuda/moe/params.h"

namespace rill::cuda::moe {
namespace {

constexpr uint8_t kScaleOne = 127;  // E8M0 of 1.0: the scale of padding rows (their codes are zero-filled)

// 16 columns of one B row: 8 packed bytes (low nibble = even column) and the row's scale, to 16 bf16. Per
// 32-bit word (8 codes, code i = column i): pairs (i, i + 4) decoded by fp4x2_to_bf162 and scaled by a second
// bf16 multiply (both exact, see device.cuh; the one-multiply form of fp4x2_scaled_bf162 measured ~2.5% slower
// here, its branch costing more than the multiply), put back in column order by byte permutes.
__device__ __forceinline__ void dequant16(const uint2 q, uint32_t s, bf16* dst) {
  const __nv_bfloat162 scale = e8m0_bf162(s);
  const uint32_t words[2] = {q.x, q.y};
  uint32_t out[8];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    uint32_t pair[4];  // pair[i]: columns i (low half) and i + 4 (high half) of this word
#pragma unroll
    for (int i = 0; i < 4; ++i) pair[i] = bits_from_bf162(__hmul2(fp4x2_to_bf162(words[k] >> (4 * i)), scale));
    out[4 * k + 0] = __byte_perm(pair[0], pair[1], 0x5410);  // columns 0, 1
    out[4 * k + 1] = __byte_perm(pair[2], pair[3], 0x5410);  // 2, 3
    out[4 * k + 2] = __byte_perm(pair[0], pair[1], 0x7632);  // 4, 5
    out[4 * k + 3] = __byte_perm(pair[2], pair[3], 0x7632);  // 6, 7
  }
  reinterpret_cast<uint4*>(dst)[0] = make_uint4(out[0], out[1], out[2], out[3]);
  reinterpret_cast<uint4*>(dst)[1] = make_uint4(out[4], out[5], out[6], out[7]);
}

template <bool kGateUp>
__global__ void __launch_bounds__(kGemmThreads) grouped_gemm_mxfp4_kernel(const GroupedGemmParams p) {
  __shared__ __align__(16) bf16 As[kStages][kBM][kLds];
  __shared__ __align__(16) uint8_t Bq[kStages][kBN][kMxRowBytes];  // packed codes of each stage
  __shared__ uint8_t Bsc[kStages][kBN];                            // the rows' E8M0 scales of each stage
  __shared__ __align__(16) bf16 Bs[kBN][kLds];                     // the stage being multiplied, in bf16
  GroupedTile t;
  if (!locate_tile(p, blockIdx.y, t)) return;
  const int n0 = blockIdx.x * (kGateUp ? kGateUpCols : kBN);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 1, wn = warp >> 1;
  // A loader as in the bf16 kernel: 64 rows x 4 chunks of 8 bf16, one chunk per thread (K % 32 == 0: no
  // k tail). B loader: row tid % 128; threads below 128 copy its packed bytes, the others load its scale.
  const int ld_row = tid >> 2, ld_col = (tid & 3) * 8;
  const bf16* a_src = a_tile_row(p, t, ld_row);
  const int b_row = tid & (kBN - 1);
  const bool b_packed_loader = tid < kBN;
  int b_col;
  const int src_row = b_tile_row<kGateUp>(b_row, n0, p.n, b_col);
  const bool b_valid = b_col < p.n;
  const uint8_t* bq_src =
      b_valid ? p.w_packed + int64_t(t.e) * p.w_expert_stride + int64_t(src_row) * p.ldw : nullptr;
  const uint8_t* bs_src =
      b_valid ? p.w_scales + int64_t(t.e) * p.s_expert_stride + int64_t(src_row) * p.lds : nullptr;
  auto load_stage = [&](int stage, int kt) {
    cp_async16(&As[stage][ld_row][ld_col], a_src ? a_src + kt * kBK + ld_col : p.a, a_src != nullptr);
    if (b_packed_loader)
      cp_async16(&Bq[stage][b_row][0], bq_src ? bq_src + kt * kMxRowBytes : p.w_packed, bq_src != nullptr);
  };
  auto load_scale = [&](int kt) -> uint8_t { return bs_src ? bs_src[kt] : kScaleOne; };

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
    const uint8_t next_scale = has_next && !b_packed_loader ? load_scale(next) : kScaleOne;
    const int st = kt % kStages;
    dequant16(*reinterpret_cast<const uint2*>(&Bq[st][dq_row][dq_half * 8]), Bsc[st][dq_row],
              &Bs[dq_row][dq_half * 16]);
    __syncthreads();  // Bs is complete
    mma_k_tile(acc, As[st], Bs, wm, wn, lane);
    // Stage `next` was last read by the dequant of step kt - 1, before this step's first barrier; it is
    // read next by the dequant of step `next`, after two more barriers.
    if (has_next && !b_packed_loader) Bsc[next % kStages][b_row] = next_scale;
  }
  cp_async_wait<0>();
  store_grouped_tile<kGateUp>(p, t, n0, acc, wm, wn, lane);
}

Status check_mxfp4_params(const GroupedGemmParams& p, const char* name) {
  if (p.k % kBK != 0 || p.ldw % 16 != 0 || p.w_expert_stride % 16 != 0)
    return invalid_argument(
        "{}: MXFP4 needs K % {} == 0 and 16-byte aligned packed rows (K {}, rows {} B, "
        "experts {} B apart)",
        name, kBK, p.k, p.ldw, p.w_expert_stride);
  return {};
}

}  // namespace

Status launch_grouped_gate_up_mxfp4(const GroupedGemmParams& p, int max_tiles, cudaStream_t stream) {
  if (max_tiles <= 0 || p.n <= 0) return {};
  RILL_TRY(check_mxfp4_params(p, "moe_grouped_gate_up_mxfp4"));
  const dim3 grid(unsigned((p.n + kGateUpCols - 1) / kGateUpCols), unsigned(max_tiles));
  grouped_gemm_mxfp4_kernel<true><<<grid, kGemmThreads, 0, stream>>>(p);
  RILL_CUDA_CHECK_LAUNCH("moe_grouped_gate_up_mxfp4");
  return {};
}

Status launch_grouped_down_mxfp4(const GroupedGemmParams& p, int max_tiles, cudaStream_t stream) {
  if (max_tiles <= 0 || p.n <= 0) return {};
  RILL_TRY(check_mxfp4_params(p, "moe_grouped_down_mxfp4"));
  const dim3 grid(unsigned((p.n + kBN - 1) / kBN), unsigned(max_tiles));
  grouped_gemm_mxfp4_kernel<false><<<grid, kGemmThreads, 0, stream>>>(p);
  RILL_CUDA_CHECK_LAUNCH("moe_grouped_down_mxfp4");
  return {};
}

}  // namespace rill::cuda::moe
