// Grouped expert GEMMs on Hopper, one kernel body for bf16, MXFP4 and FP8 experts (weight policies, below):
// out[slot, :] = a[slot, :] . W_e^T for the slots of each expert e, with A the activations in expert order
// (x gathered for gate_up, h for down) and W the stacked experts. The bf16 form first:
//
// Persistent CTAs (grid: the device's SM count, or fewer when the step has fewer work items) walk the work
// items of moe/wgmma_schedule.h (expert, 128-slot tile, column tile; m-tile major), found from the plan's
// device offsets (copied into shared memory once per CTA), so the launch shape never depends on data and
// nothing is read back to the host. Each CTA is 384 threads:
//  - warpgroup 0 loads: one thread issues, per 64-wide k step, a TMA box of A (128 slots x 64, 16 KiB) and
//    two of B (2 x 128 weight rows x 64, 32 KiB) into one of 4 shared-memory stages (128-byte swizzle),
//    completing on the stage's `full` mbarrier; before refilling a stage it waits on its `empty` mbarrier.
//    It keeps 40 registers (setmaxnreg) and runs ahead across work items while the consumers store tiles.
//  - warpgroups 1 and 2 compute rows 0-63 and 64-127 of the tile: wait `full`, four wgmma m64n256k16 (A and
//    B from shared memory through descriptors, fp32 accumulators: 128 registers a thread), commit, wait for
//    the previous step's group only and release that step's stage (one arrival per warp on `empty`), so the
//    tensor cores always have the next group queued. Then the epilogue stores straight from registers.
// gate_up: B rows 0-127 are the gate rows n0.. and rows 128-255 the up rows I + n0.. of the same expert, so
// accumulator n8 block j < 16 and block j + 16 hold gate and up of one output column; the epilogue rounds
// both to bf16, applies the activation in fp32 and stores bf16 h. down: 256 weight rows, output rounded to
// bf16. Rows past an expert's slots (the A rows of the next expert, or past the tensor: zeros) and weight
// rows past n (gate_up: up rows; down: zeros past the expert, or a stale half stage where the second box
// would lie wholly past it and is not loaded) are computed and never stored; TMA zero-fills k past K.
//
// One kernel body, a weight policy per format (style §7.10): Bf16Weights (the above) and Mxfp4Weights (K3's
// MXFP4 experts, W4A16; option moe_wgmma_mxfp4, on for steps of at least moe_wgmma_mxfp4_min_pairs pairs,
// where it measured faster than grouped_gemm_mxfp4.cu, docs/PERF.md): the loader thread brings A as above and
// B's packed codes (two boxes of 128 rows x 32 bytes, unswizzled) into the same stage; the consumers write
// the codes of a step as bf16 times their E8M0 scale (read from global memory, L2-resident) into one of
// three B tiles in the 128-byte swizzle (wgmma_schedule.h wgmma_mxfp4_*) while the tensor cores run the step
// before, fence the generic proxy against wgmma's async one and meet at a named barrier before issuing the
// step's wgmmas (accumulate_mxfp4); a consumer warpgroup with none of the expert's slots in its 64 rows only
// dequantises (no wgmma, no stores). The products of bf16 activations and the exact dequantised weights are
// the MXFP4 mma.sync kernel's. Fp8Weights (the 48B's `--quantization fp8` experts; option moe_wgmma_fp8):
// E4M3 activations quantised per (slot, 128 columns) with scale amax / 448 (gemm/fp8_native.cu's rule; x
// straight from its token rows into expert order, h where the gate_up GEMM wrote it), E4M3 weights with 128 x
// 128 F32 block scales; stages of 128 codes (one scale block) with B boxes of 64 rows, wgmma m64n128k32 into
// a block accumulator promoted per stage with the two scales (accumulate_fp8): out[slot, :] = sum over k
// blocks kb of (codes_a . codes_w^T)[kb] * a_scale[slot][kb] * w_scale[e][row/128][kb]. Fp8ChannelWeights
// (one scale per weight row: `--quantization ptpc_fp8`, or a compressed-tensors "channel" checkpoint; the
// same option): activations quantised per slot over the whole row, the bf16 tile in bytes (128 codes a stage)
// with m64n256k32 e4m3 into one accumulator over all of K, out[slot, :] = (codes_a . codes_w^T) *
// a_scale[slot] * w_scale[e][row], the scales applied in the epilogue.
#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>

#include "backend/cuda/common/check.h"
#include "backend/cuda/common/hopper.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/smem.h"
#include "backend/cuda/common/tensor_map.h"
#include "backend/cuda/gemm/fp8_native.h"
#include "backend/cuda/moe/device.cuh"
#include "backend/cuda/moe/grouped_cublas_path.h"
#include "backend/cuda/moe/grouped_wgmma.h"
#include "backend/cuda/moe/wgmma_schedule.h"

namespace rill::cuda::moe {
namespace {

constexpr int kConsumerWarps = 8;  // arrivals that release a stage: every consumer warp after its wgmma wait

// Weight policies: the tile (k per stage, rows of a B box, stage bytes, accumulators a consumer thread), the
// stages of A (and of B, or for MXFP4 of its packed codes) and the B tiles, the registers setmaxnreg gives
// the producer warpgroup and each consumer thread (multiples of 8 within the 64K registers), the shared
// memory. Mxfp4Weights: the bf16 tile's stages of A with the packed codes beside them, three B tiles the
// consumers dequantise into (wgmma_schedule.h "MXFP4 variant"). Fp8Weights: E4M3 A and B, 128 codes (one
// scale block) a stage, B boxes of 64 rows, m64n128k32 into a block accumulator promoted per stage
// (wgmma_schedule.h "FP8 variant").
struct Bf16Weights {
  static constexpr bool kDequant = false, kFp8 = false, kChannel = false;
  static constexpr int kBK = kWgBK, kBoxRows = kWgBoxRows, kAccRegs = kWgAccRegs;
  static constexpr int kAStageBytes = kWgAStageBytes, kBStageBytes = kWgBStageBytes;
  static constexpr int kStages = kWgStages, kBTiles = kWgStages, kRawStageBytes = 0;
  static constexpr bool kSetMaxNreg = true;
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
  static constexpr int kSmemBytes = kWgSmemBytes;
  static constexpr int tile_cols(bool gate_up) { return wgmma_tile_cols(gate_up); }
  static constexpr const char *kName = "moe_grouped_wgmma", *kGateUpName = "moe_grouped_wgmma_gate_up",
                              *kDownName = "moe_grouped_wgmma_down";
};
struct Mxfp4Weights {
  static constexpr bool kDequant = true, kFp8 = false, kChannel = false;
  static constexpr int kBK = kWgBK, kBoxRows = kWgBoxRows, kAccRegs = kWgAccRegs;
  static constexpr int kAStageBytes = kWgAStageBytes, kBStageBytes = kWgBStageBytes;
  static constexpr int kStages = kWg4Stages, kBTiles = kWg4BBuffers, kRawStageBytes = kWg4RawStageBytes;
  static constexpr bool kSetMaxNreg = true;
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
  static constexpr int kSmemBytes = kWg4SmemBytes;
  static constexpr int tile_cols(bool gate_up) { return wgmma_tile_cols(gate_up); }
  static constexpr const char *kName = "moe_grouped_wgmma_mxfp4",
                              *kGateUpName = "moe_grouped_wgmma_mxfp4_gate_up",
                              *kDownName = "moe_grouped_wgmma_mxfp4_down";
};
struct Fp8Weights {
  static constexpr bool kDequant = false, kFp8 = true, kChannel = false;
  static constexpr int kBK = kWg8BK, kBoxRows = kWg8BoxRows, kAccRegs = kWg8AccRegs;
  static constexpr int kAStageBytes = kWg8AStageBytes, kBStageBytes = kWg8BStageBytes;
  static constexpr int kStages = kWg8Stages, kBTiles = kWg8Stages, kRawStageBytes = 0;
  static constexpr bool kSetMaxNreg = true;
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
  static constexpr int kSmemBytes = kWg8SmemBytes;
  static constexpr int tile_cols(bool gate_up) { return wgmma_fp8_tile_cols(gate_up); }
  static constexpr const char *kName = "moe_grouped_wgmma_fp8",
                              *kGateUpName = "moe_grouped_wgmma_fp8_gate_up",
                              *kDownName = "moe_grouped_wgmma_fp8_down";
  static constexpr Fp8ActScaling kActScaling = Fp8ActScaling::Group128;
};
// Fp8ChannelWeights: E4M3 A and B with one scale per slot and per weight row (wgmma_schedule.h "per-channel
// FP8 variant"): the bf16 tile in bytes (128 codes a stage), m64n256k32 over all of K into one accumulator,
// the scales in the epilogue.
struct Fp8ChannelWeights {
  static constexpr bool kDequant = false, kFp8 = false, kChannel = true;
  static constexpr int kBK = kWgChannelBK, kBoxRows = kWgBoxRows, kAccRegs = kWgAccRegs;
  static constexpr int kAStageBytes = kWgAStageBytes, kBStageBytes = kWgBStageBytes;
  static constexpr int kStages = kWgStages, kBTiles = kWgStages, kRawStageBytes = 0;
  static constexpr bool kSetMaxNreg = true;
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
  static constexpr int kSmemBytes = kWgSmemBytes;
  static constexpr int tile_cols(bool gate_up) { return wgmma_tile_cols(gate_up); }
  static constexpr const char *kName = "moe_grouped_wgmma_fp8_channel",
                              *kGateUpName = "moe_grouped_wgmma_fp8_channel_gate_up",
                              *kDownName = "moe_grouped_wgmma_fp8_channel_down";
  static constexpr Fp8ActScaling kActScaling = Fp8ActScaling::PerToken;
};
static_assert(kWgChannelBK == kWgSwizzleBytes && Fp8ChannelWeights::kAStageBytes == kWgBM * kWgChannelBK &&
                  Fp8ChannelWeights::kBStageBytes == kWgBN * kWgChannelBK,
              "a per-channel FP8 stage is the bf16 stage's bytes: 128 codes a 128-byte swizzle row");
static_assert(128 * Bf16Weights::kProducerRegs + 256 * Bf16Weights::kConsumerRegs <= 65536 &&
              Bf16Weights::kProducerRegs % 8 == 0 && Bf16Weights::kConsumerRegs % 8 == 0);
static_assert(kWg4DequantThreads == 2 * 128 && kWg4Units == 2 * kWg4DequantThreads &&
              kWg4RawStageBytes == 2 * kWg4RawBoxBytes && kWg4BBuffers == 3);
static_assert(kWgThreads == 3 * 128 && kConsumerWarps == 2 * 4, "one producer and two consumer warpgroups");
static_assert(kWgBM == 2 * kWgConsumerRows && kWgBoxRows == kWgBM && kWgBN == 2 * kWgBoxRows);
static_assert(kWgBK * 2 == kWgSwizzleBytes, "a stage row is one 128-byte swizzle row");
static_assert(kWgAccRegs == 128, "wgmma_m64n256k16_bf16 holds 128 accumulators a thread");
static_assert(kWg8BK == kWgSwizzleBytes && kWg8BK == kWg8ScaleBlock, "an FP8 stage row is one scale block");
static_assert(kWg8BN == 2 * kWg8BoxRows && kWg8AStageBytes == kWgAStageBytes);
static_assert(kWg8AccRegs == 64, "wgmma_m64n128k32_e4m3 holds 64 accumulators a thread");
static_assert(128 * Fp8Weights::kProducerRegs + 256 * Fp8Weights::kConsumerRegs <= 65536);
static_assert(kWgMaxExperts == kMaxExperts, "the offsets' room in shared memory");

struct WgmmaGemmParams {
  const int32_t* expert_offsets;  // [E + 1]: expert e's slots are [offsets[e], offsets[e+1])
  const int32_t* tile_offsets;    // [E + 1]: expert e's first 128-slot tile
  int n_experts, k, n;            // k: reduction width (gate_up: Hx, down: I); n: output columns (I, Hx)
  int n_tiles;                    // column tiles per 128-slot tile: ceil(n / wgmma_tile_cols)
  int b_second;  // B's second box starts this many weight rows after the first (gate_up: I; down: a box)
  int b_rows;    // weight rows per expert (gate_up: 2I, down: Hx)
  bf16* out;                      // [P, n], row stride ldo
  int64_t ldo;
  Act act;  // gate_up only
  float beta, linear_beta;
  // Mxfp4Weights: the E8M0 scales [E, b_rows, k / 32] (strides in bytes).
  const uint8_t* w_scales;
  int64_t s_expert_stride, lds;
  // Fp8Weights: the activations' scales [k / 128, pairs] and the weights' F32 block scales [E, b_rows / 128,
  // k / 128] (strides in elements).
  int64_t pairs;
  const float* a_scales;
  const float* fp8_w_scales;
  int64_t ws_expert_stride, ws_ld;
};

// The consumers' k loop of one work item with one accumulator over all of K (Bf16Weights, Mxfp4Weights: bf16
// B, four wgmma m64n256k16 a stage; Fp8ChannelWeights: E4M3, four m64n256k32): a stage is released once the
// group after it is issued (lag one), so the tensor cores always have the next group queued.
template <class W>
__device__ __forceinline__ void accumulate_whole_k(float (&acc)[W::kAccRegs], int consumer, int lane,
                                                   uint32_t a0, uint32_t b0, uint32_t full0, uint32_t empty0,
                                                   int k_tiles, int& stage, uint32_t& phase) {
#pragma unroll
  for (int i = 0; i < W::kAccRegs; ++i) acc[i] = 0.0f;
  int in_flight = -1;  // the stage whose wgmmas may still be reading it
  for (int kt = 0; kt < k_tiles; ++kt) {
    mbar_wait(full0 + 8 * stage, phase);
    const uint32_t a = a0 + stage * W::kAStageBytes + consumer * kWgConsumerRows * kWgSwizzleBytes;
    const uint32_t b = b0 + stage * W::kBStageBytes;
#pragma unroll
    for (int i = 0; i < W::kAccRegs; ++i) wgmma_fence_operand(acc[i]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kWgSwizzleBytes / 32; ++kk) {  // k16 (bf16) or k32 (E4M3) steps: 32 bytes a row
      if constexpr (W::kChannel)
        wgmma_m64n256k32_e4m3(acc, wgmma_desc_sw128(a + kk * 32), wgmma_desc_sw128(b + kk * 32),
                              (kt | kk) != 0 ? 1u : 0u);
      else
        wgmma_m64n256k16_bf16(acc, wgmma_desc_sw128(a + kk * 32), wgmma_desc_sw128(b + kk * 32),
                              (kt | kk) != 0 ? 1u : 0u);
    }
    wgmma_commit();
    // Lag-one release: this step's group may still run (it chains on the same accumulators, which wgmma
    // orders by itself); the previous step's group has completed, its shared-memory reads included, so
    // that stage goes back to the producer.
    wgmma_wait<1>();
#pragma unroll
    for (int i = 0; i < W::kAccRegs; ++i) wgmma_fence_operand(acc[i]);
    if (in_flight >= 0 && lane == 0) mbar_arrive(empty0 + 8 * in_flight);
    in_flight = stage;
    if (++stage == W::kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < W::kAccRegs; ++i) wgmma_fence_operand(acc[i]);
  if (in_flight >= 0 && lane == 0) mbar_arrive(empty0 + 8 * in_flight);  // one arrival per warp
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The consumers' k loop for MXFP4 experts (Mxfp4Weights): per step, each of the 256 consumer threads (t)
// turns units t and t + 256 of the stage's packed codes into B tile `b_tile` (wgmma_mxfp4_*: bf16 times the
// unit's E8M0 scale, in the 128-byte swizzle) while the previous step's wgmmas run, fences them against
// wgmma's async proxy, meets the other warpgroup at named barrier 1, then issues four wgmma m64n256k16 and
// releases the previous step's stage (lag one, as accumulate_whole_k). B tile g % 3 of global step g was last
// read by step g - 3's wgmmas, complete in both warpgroups before either passed step g - 1's barrier. A
// unit's scale byte is loaded before the stage wait (its latency hides behind it); rows past the expert's
// (TMA zero-filled, or a second box not loaded) take scale 1.0 and feed only columns that are never stored.
//
// kIssue false: none of this warpgroup's 64 rows is one of the expert's slots (an expert's mostly empty last
// tile: K3 at 2K tokens has 37 slots an expert on average, so its one tile is more than half empty), so it
// issues no wgmma and only dequantises its half of each step's B tile for the other warpgroup, whose wgmmas
// then have the tensor cores to themselves (the three-tile argument above holds: only the other warpgroup's
// wgmmas read the tiles, and it waits for them as before). A template parameter, not a branch around the
// wgmmas, which ptxas would fence with extra warpgroup.arrives. (The same skip in the bf16 and FP8 policies'
// loops measured slower at 8K tokens on the H100, 2026-12-07: docs/PERF.md.)
template <class W, bool kIssue>
__device__ __forceinline__ void accumulate_mxfp4(float (&acc)[W::kAccRegs], const WgmmaGemmParams& p,
                                                 const WgmmaWork& w, unsigned char* smem, int consumer,
                                                 int lane, uint32_t a0, uint32_t b0, uint32_t raw0,
                                                 uint32_t full0, uint32_t empty0, int k_tiles, int& stage,
                                                 uint32_t& phase, int& b_tile) {
  constexpr int kPerThread = kWg4Units / kWg4DequantThreads;
  const int t = consumer * 128 + (int(threadIdx.x) & 127);
  auto at = [&](uint32_t addr) { return smem + (addr - smem_addr(smem)); };
  const uint8_t* scale_row[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int row = wgmma_tile_weight_row(wgmma_mxfp4_unit(t + j * kWg4DequantThreads).row, w.n0, p.b_second);
    scale_row[j] =
        row < p.b_rows ? p.w_scales + int64_t(w.e) * p.s_expert_stride + int64_t(row) * p.lds : nullptr;
  }
#pragma unroll
  for (int i = 0; i < W::kAccRegs; ++i) acc[i] = 0.0f;
  int in_flight = -1;  // the stage whose wgmmas may still be reading it
  for (int kt = 0; kt < k_tiles; ++kt) {
    uint32_t scale[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j)
      scale[j] =
          scale_row[j]
              ? uint32_t(__ldg(scale_row[j] +
                               wgmma_mxfp4_scale_col(kt, wgmma_mxfp4_unit(t + j * kWg4DequantThreads).group)))
              : 127u;
    mbar_wait(full0 + 8 * stage, phase);  // A and the codes are in
    const uint32_t raw = raw0 + stage * W::kRawStageBytes, b = b0 + b_tile * W::kBStageBytes;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const Mxfp4Unit unit = wgmma_mxfp4_unit(t + j * kWg4DequantThreads);
      const uint4 q = *reinterpret_cast<const uint4*>(at(raw + wgmma_mxfp4_raw_offset(unit)));
      const __nv_bfloat162 sc = e8m0_bf162(scale[j]);
      uint32_t lo[8], hi[8];  // columns 0-15 and 16-31 of the unit's group
      mxfp4_dequant16(make_uint2(q.x, q.y), sc, lo);
      mxfp4_dequant16(make_uint2(q.z, q.w), sc, hi);
      *reinterpret_cast<uint4*>(at(b + wgmma_mxfp4_chunk_offset(unit, 0))) =
          make_uint4(lo[0], lo[1], lo[2], lo[3]);
      *reinterpret_cast<uint4*>(at(b + wgmma_mxfp4_chunk_offset(unit, 1))) =
          make_uint4(lo[4], lo[5], lo[6], lo[7]);
      *reinterpret_cast<uint4*>(at(b + wgmma_mxfp4_chunk_offset(unit, 2))) =
          make_uint4(hi[0], hi[1], hi[2], hi[3]);
      *reinterpret_cast<uint4*>(at(b + wgmma_mxfp4_chunk_offset(unit, 3))) =
          make_uint4(hi[4], hi[5], hi[6], hi[7]);
    }
    fence_proxy_async_smem();                   // these stores before wgmma's reads of the tile
    named_barrier_sync(1, kWg4DequantThreads);  // and the other warpgroup's half of it
    const uint32_t a = a0 + stage * W::kAStageBytes + consumer * kWgConsumerRows * kWgSwizzleBytes;
#pragma unroll
    for (int i = 0; i < W::kAccRegs; ++i) wgmma_fence_operand(acc[i]);
    wgmma_fence();
    if constexpr (kIssue) {
#pragma unroll
      for (int kk = 0; kk < kWgSwizzleBytes / 32; ++kk)  // k16 steps: 32 bytes along the swizzled rows
        wgmma_m64n256k16_bf16(acc, wgmma_desc_sw128(a + kk * 32), wgmma_desc_sw128(b + kk * 32),
                              (kt | kk) != 0 ? 1u : 0u);
    }
    wgmma_commit();  // (without kIssue an empty group: the waits and releases below stay as they are)
    wgmma_wait<1>();  // the previous step's group is complete: its stage (A and codes) goes back
#pragma unroll
    for (int i = 0; i < W::kAccRegs; ++i) wgmma_fence_operand(acc[i]);
    if (in_flight >= 0 && lane == 0) mbar_arrive(empty0 + 8 * in_flight);
    in_flight = stage;
    if (++stage == W::kStages) {
      stage = 0;
      phase ^= 1;
    }
    if (++b_tile == W::kBTiles) b_tile = 0;
  }
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < W::kAccRegs; ++i) wgmma_fence_operand(acc[i]);
  if (in_flight >= 0 && lane == 0) mbar_arrive(empty0 + 8 * in_flight);  // one arrival per warp
}
#endif

// The consumers' k loop for E4M3 operands (Fp8Weights): per stage (one 128-code scale block) four wgmma
// m64n128k32 into a block accumulator, wait for it (the scales apply per block, so no group stays in flight),
// release the stage, then promote: acc += blk * a_scale(row) * w_scale(box). The other consumer warpgroup's
// wgmmas overlap this one's promotion. (Promoting block kt - 1 while block kt's wgmmas run, with two block
// accumulators, measured slower on the H100: the 48B's FP8 8K prompt 141.9 ms against 138.8, docs/PERF.md.)
// Rows this thread holds: row0 and row0 + 8 of the tile; valid0 / valid1 whether they are the expert's slots.
template <class W, bool kGateUp>
__device__ __forceinline__ void accumulate_fp8(float (&acc)[W::kAccRegs], const WgmmaGemmParams& p,
                                               const WgmmaWork& w, int seg, int row0, bool valid0,
                                               bool valid1, int consumer, int lane, uint32_t a0, uint32_t b0,
                                               uint32_t full0, uint32_t empty0, int k_tiles, int& stage,
                                               uint32_t& phase) {
  const float* a_s0 = p.a_scales + (seg + w.m0 + row0);
  const float* ws = p.fp8_w_scales + int64_t(w.e) * p.ws_expert_stride;
  // (gate_up: p.b_second is I, where the up rows start)
  const float* ws0 = ws + int64_t(wgmma_fp8_w_scale_row(kGateUp, w.n0, p.b_second, 0)) * p.ws_ld;
  const float* ws1 = ws + int64_t(wgmma_fp8_w_scale_row(kGateUp, w.n0, p.b_second, 1)) * p.ws_ld;
  float blk[W::kAccRegs];
#pragma unroll
  for (int i = 0; i < W::kAccRegs; ++i) acc[i] = 0.0f;
  for (int kt = 0; kt < k_tiles; ++kt) {
    // This block's scales, loaded while the stage may still be arriving (L2 hits after the first tile).
    const int64_t at = wgmma_fp8_a_scale_index(0, kt, p.pairs);
    const float sa0 = valid0 ? a_s0[at] : 0.0f, sa1 = valid1 ? a_s0[at + 8] : 0.0f;
    const float sw0 = ws0[kt], sw1 = ws1[kt];
    mbar_wait(full0 + 8 * stage, phase);
    const uint32_t a = a0 + stage * W::kAStageBytes + consumer * kWgConsumerRows * kWgSwizzleBytes;
    const uint32_t b = b0 + stage * W::kBStageBytes;
#pragma unroll
    for (int i = 0; i < W::kAccRegs; ++i) wgmma_fence_operand(blk[i]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < W::kBK / 32; ++kk)  // k32 steps: 32 bytes along the swizzled 128-byte rows
      wgmma_m64n128k32_e4m3(blk, wgmma_desc_sw128(a + kk * 32), wgmma_desc_sw128(b + kk * 32),
                            kk != 0 ? 1u : 0u);
    wgmma_commit();
    wgmma_wait<0>();  // the block's product is complete (its shared-memory reads too)
#pragma unroll
    for (int i = 0; i < W::kAccRegs; ++i) wgmma_fence_operand(blk[i]);
    if (lane == 0) mbar_arrive(empty0 + 8 * stage);  // one arrival per warp
    // Register i's row is row0 (+ 8 for i % 4 >= 2), its weight rows those of box wgmma_fp8_acc_box(i)
    // (both compile-time per unrolled i).
    const float s00 = sa0 * sw0, s01 = sa0 * sw1, s10 = sa1 * sw0, s11 = sa1 * sw1;
#pragma unroll
    for (int i = 0; i < W::kAccRegs; ++i) {
      const bool hi_row = (i & 2) != 0, box1 = wgmma_fp8_acc_box(i) != 0;
      acc[i] = fmaf(blk[i], hi_row ? (box1 ? s11 : s10) : (box1 ? s01 : s00), acc[i]);
    }
    if (++stage == W::kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
}

// Fp8ChannelWeights' epilogue scales of one work item: the weight scale of each output column a consumer
// thread holds (accumulator register i multiplies w[channel_scale_index(i)]: the n8 block's two columns,
// gate_up's up blocks after its gate blocks) and the activation scales of its two rows. Loaded before the k
// loop, so their latency hides behind it; zero past the expert's rows or past n.
constexpr int kChannelScales = kWgAccRegs / 2;
__device__ __forceinline__ constexpr int channel_scale_index(int i) {
  return 2 * (i >> 2) + (i & 1);
}
struct ChannelScales {
  float w[kChannelScales];
  float a0, a1;
};
template <bool kGateUp>
__device__ __forceinline__ void load_channel_scales(ChannelScales& s, const WgmmaGemmParams& p,
                                                    const WgmmaWork& w, int seg, int row0, int m_valid,
                                                    int lane) {
  const float* ws = p.fp8_w_scales + int64_t(w.e) * p.ws_expert_stride;  // [rows], contiguous
#pragma unroll
  for (int x = 0; x < kChannelScales; x += 2) {     // columns col, col + 1: adjacent weight rows (n0, I even)
    const int col = 8 * (x >> 1) + 2 * (lane & 3);  // a column of the 256-row B tile
    const int out_col = kGateUp ? col % kWgBoxRows : col;  // gate_up: gate and up of one output column
    const float2 v = w.n0 + out_col < p.n
                         ? *reinterpret_cast<const float2*>(ws + wgmma_tile_weight_row(col, w.n0, p.b_second))
                         : make_float2(0.0f, 0.0f);
    s.w[x] = v.x;
    s.w[x + 1] = v.y;
  }
  s.a0 = row0 < m_valid ? p.a_scales[seg + w.m0 + row0] : 0.0f;
  s.a1 = row0 + 8 < m_valid ? p.a_scales[seg + w.m0 + row0 + 8] : 0.0f;
}

// The epilogue of one work item: a consumer thread's accumulators (scaled, for Fp8ChannelWeights), through
// the activation for gate_up, rounded to bf16 and stored straight from registers; pairs (i, i + 1) share a
// row and hold adjacent columns (wgmma_acc_pos). It is unrolled over a thread's 64 (gate_up) or 128
// registers, so its code size is the instruction cache's business: the activation is fixed at compile time
// (the caller branches once per item) and SiLU goes through the fast exponential and reciprocal (MUFU: a few
// ulp of fp32, far below the bf16 rounding that follows). With a runtime choice and expf, IEEE division and
// SiTU's tanhf inlined at every element, the per-channel FP8 gate_up kernel was ~135 KB of code and ncu
// sampled 30% of its warps waiting for instructions.
template <class W, bool kGateUp, Act kAct>
__device__ __forceinline__ void store_tile(const float (&acc)[W::kAccRegs], const WgmmaGemmParams& p,
                                           const WgmmaWork& w, const ChannelScales& cs, int seg, int m_valid,
                                           int consumer, int warp, int lane) {
  // The thread's two rows (row0 and row0 + 8 of wgmma_acc_pos) and whether they are the expert's slots; the
  // values are computed for every register and the stores predicated (no branches in the unrolled body).
  const int row0 = consumer * kWgConsumerRows + 16 * warp + (lane >> 2);
  bf16* out0 = p.out + int64_t(seg + w.m0 + row0) * p.ldo + w.n0;
  bf16* out1 = out0 + 8 * p.ldo;
  const bool ok0 = row0 < m_valid, ok1 = row0 + 8 < m_valid;
  auto value = [&](int r) {  // accumulator r's value
    if constexpr (W::kChannel)
      return acc[r] * ((r & 2) ? cs.a1 : cs.a0) * cs.w[channel_scale_index(r)];
    else
      return acc[r];
  };
  auto act = [&](float g, float u) {
    if constexpr (kAct == Act::Silu)
      return __fdividef(g, 1.0f + __expf(-g)) * u;
    else
      return expert_act(Act::Situ, g, u, p.beta, p.linear_beta);
  };
#pragma unroll
  for (int i = 0; i < (kGateUp ? W::kAccRegs / 2 : W::kAccRegs); i += 2) {
    const WgmmaAccPos q = wgmma_acc_pos(warp, lane, i);  // row row0 (+ 8 when i % 4 == 2), columns q.col, + 1
    float v0 = value(i), v1 = value(i + 1);
    if constexpr (kGateUp) {  // up is the second half of the n8 blocks: kAccRegs / 2 registers further
      v0 = act(round_bf16(v0), round_bf16(value(i + W::kAccRegs / 2)));
      v1 = act(round_bf16(v1), round_bf16(value(i + 1 + W::kAccRegs / 2)));
    }
    const bool hi = (i & 2) != 0;
    if ((hi ? ok1 : ok0) && w.n0 + q.col < p.n)  // n is even: column q.col + 1 is in range too
      *reinterpret_cast<__nv_bfloat162*>((hi ? out1 : out0) + q.col) = __floats2bfloat162_rn(v0, v1);
  }
}

template <class W, bool kGateUp>
__global__ void __launch_bounds__(kWgThreads, 1)
    moe_grouped_wgmma_kernel(const __grid_constant__ CUtensorMap a_map,
                             const __grid_constant__ CUtensorMap b_map, const WgmmaGemmParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kStages = W::kStages;
  constexpr int kStageBytes = W::kAStageBytes + W::kBStageBytes;  // what a TMA-fed stage's loads complete
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;  // kSmemBytes keeps 1024 bytes for this
  const uint32_t a0 = base, b0 = base + kStages * W::kAStageBytes;
  const uint32_t raw0 = b0 + W::kBTiles * W::kBStageBytes;  // Mxfp4Weights: the packed codes of each stage
  const uint32_t full0 = raw0 + kStages * W::kRawStageBytes, empty0 = full0 + kStages * 8;
  // The plan's offsets, [E + 1] each, after the barriers (generic pointers into the same aligned window).
  int32_t* s_slots = reinterpret_cast<int32_t*>(smem_raw + (empty0 + kStages * 8 - smem_addr(smem_raw)));
  int32_t* s_tiles = s_slots + kWgMaxExperts + 1;
  const int warpgroup = int(threadIdx.x) / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full0 + 8 * s, 1);  // the producer's arrive_expect_tx: the bytes complete the phase
      mbar_init(empty0 + 8 * s, kConsumerWarps);
    }
    mbar_fence_init();
    tma_prefetch_map(&a_map);
    tma_prefetch_map(&b_map);
  }
  pdl_prologue();  // the offsets and A come from the kernels before
  for (int e = int(threadIdx.x); e <= p.n_experts; e += kWgThreads) {
    s_slots[e] = p.expert_offsets[e];
    s_tiles[e] = p.tile_offsets[e];
  }
  __syncthreads();  // the barriers' initialisation and the offsets
  constexpr int kCols = W::tile_cols(kGateUp);
  const int n_items = s_tiles[p.n_experts] * p.n_tiles;
  const int k_tiles = (p.k + W::kBK - 1) / W::kBK;

  if (warpgroup == 0) {
    if constexpr (W::kSetMaxNreg) setmaxnreg_dec<W::kProducerRegs>();
    if (threadIdx.x != 0) return;
    int stage = 0;
    uint32_t phase = 0;
    for (int item = int(blockIdx.x); item < n_items; item += int(gridDim.x)) {
      const WgmmaWork w = wgmma_work(item, p.n_tiles, kCols, s_tiles, p.n_experts);
      const int a_row = s_slots[w.e] + w.m0;
      // down's last column tile may start its second box past the expert's rows: not loaded (no box is read
      // wholly out of bounds), its stale half of the stage feeds only columns past n, never stored. (FP8
      // tiles always have both: I and Hx are multiples of 128.)
      const bool second = w.n0 + p.b_second < p.b_rows;
      for (int kt = 0; kt < k_tiles; ++kt) {
        mbar_wait(empty0 + 8 * stage, phase ^ 1);  // the consumers are done with this stage's previous tile
        const uint32_t full = full0 + 8 * stage, a = a0 + stage * W::kAStageBytes;
        const int k0 = kt * W::kBK;
        if constexpr (W::kDequant) {  // A, and B's packed codes for the consumers to dequantise
          const uint32_t raw = raw0 + stage * W::kRawStageBytes;
          mbar_arrive_expect_tx(full, W::kAStageBytes + (second ? kWg4RawStageBytes : kWg4RawBoxBytes));
          tma_load_2d(a, &a_map, full, k0, a_row);
          tma_load_3d(raw, &b_map, full, k0 / 2, w.n0, w.e);  // packed: two codes a byte
          if (second) tma_load_3d(raw + kWg4RawBoxBytes, &b_map, full, k0 / 2, w.n0 + p.b_second, w.e);
        } else {
          mbar_arrive_expect_tx(full, second ? kStageBytes : kStageBytes - W::kBStageBytes / 2);
          const uint32_t b = b0 + stage * W::kBStageBytes;
          tma_load_2d(a, &a_map, full, k0, a_row);
          tma_load_3d(b, &b_map, full, k0, w.n0, w.e);
          if (second) tma_load_3d(b + W::kBStageBytes / 2, &b_map, full, k0, w.n0 + p.b_second, w.e);
        }
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    return;
  }

  if constexpr (W::kSetMaxNreg) setmaxnreg_inc<W::kConsumerRegs>();
  const int consumer = warpgroup - 1;  // rows 64 * consumer .. of the tile
  const int warp = (int(threadIdx.x) >> 5) & 3, lane = int(threadIdx.x) & 31;
  [[maybe_unused]] const int row0 =
      consumer * kWgConsumerRows + 16 * warp + (lane >> 2);  // rows row0, row0 + 8
  int stage = 0;
  [[maybe_unused]] int b_tile = 0;  // Mxfp4Weights: the B tile of the next step
  uint32_t phase = 0;
  float acc[W::kAccRegs];
  for (int item = int(blockIdx.x); item < n_items; item += int(gridDim.x)) {
    const WgmmaWork w = wgmma_work(item, p.n_tiles, kCols, s_tiles, p.n_experts);
    const int seg = s_slots[w.e];
    const int m_valid = min(kWgBM, s_slots[w.e + 1] - seg - w.m0);
    [[maybe_unused]] ChannelScales cs;
    if constexpr (W::kChannel) load_channel_scales<kGateUp>(cs, p, w, seg, row0, m_valid, lane);
    if constexpr (W::kFp8)
      accumulate_fp8<W, kGateUp>(acc, p, w, seg, row0, row0 < m_valid, row0 + 8 < m_valid, consumer, lane, a0,
                                 b0, full0, empty0, k_tiles, stage, phase);
    else if constexpr (W::kDequant) {
      if (consumer * kWgConsumerRows >= m_valid) {  // no slot in this warpgroup's rows: no wgmma, no stores
        accumulate_mxfp4<W, false>(acc, p, w, smem_raw, consumer, lane, a0, b0, raw0, full0, empty0, k_tiles,
                                   stage, phase, b_tile);
        continue;
      }
      accumulate_mxfp4<W, true>(acc, p, w, smem_raw, consumer, lane, a0, b0, raw0, full0, empty0, k_tiles,
                                stage, phase, b_tile);
    } else
      accumulate_whole_k<W>(acc, consumer, lane, a0, b0, full0, empty0, k_tiles, stage, phase);
    if (!kGateUp)
      store_tile<W, false, Act::Silu>(acc, p, w, cs, seg, m_valid, consumer, warp, lane);  // (no activation)
    else if (p.act == Act::Silu)
      store_tile<W, true, Act::Silu>(acc, p, w, cs, seg, m_valid, consumer, warp, lane);
    else
      store_tile<W, true, Act::Situ>(acc, p, w, cs, seg, m_valid, consumer, warp, lane);
  }
#else
  __trap();  // the host launches this only where the sm_90a build runs (wgmma_*experts_supported)
#endif
}

// The four tensors of a step as TMA sees them: A boxes of 128 slots x one stage's k,
// B boxes of a policy's box rows x one stage's k of one expert (rank 3: k, row, expert, so any expert stride
// works and rows past an expert's end are zeros). bf16: A and B bf16, 64 k; MXFP4: bf16 A, B the rows' 32
// packed bytes of those 64 k, unswizzled; FP8: A the quantised codes, B E4M3, 128 codes.
struct StepMaps {
  TensorMapBf16 gu_a, gu_b, dn_a, dn_b;
};

template <class W>
StepMaps step_maps(const WgmmaExpertsArgs& c) {
  const backend::ExpertWeights& ex = *c.args->experts;
  constexpr bool kPacked = W::kDequant;
  auto activations = [&](const bf16* bf16_base, int64_t k) {
    TensorMapBf16 t;
    if constexpr (W::kFp8 || W::kChannel) {
      t.elem = TensorMapElem::U8;
      t.base = c.codes;
      t.strides[0] = uint64_t(k);
    } else {
      t.base = bf16_base;
      t.strides[0] = uint64_t(k) * 2;
    }
    t.rank = 2;
    t.dims[0] = uint64_t(k);
    t.dims[1] = uint64_t(c.pairs);
    t.box[0] = W::kBK;
    t.box[1] = kWgBoxRows;
    return t;
  };
  auto weights = [&](const TensorView& w) {
    constexpr bool kBytes = kPacked || W::kFp8 || W::kChannel;
    const uint64_t elem = kBytes ? 1 : 2;
    TensorMapBf16 t;
    t.elem = kBytes ? TensorMapElem::U8 : TensorMapElem::Bf16;
    t.swizzle = !kPacked;
    t.base = w.data;
    t.rank = 3;
    t.dims[0] = uint64_t(w.size(2));
    t.dims[1] = uint64_t(w.size(1));
    t.dims[2] = uint64_t(w.size(0));
    t.strides[0] = uint64_t(w.stride(1)) * elem;
    t.strides[1] = uint64_t(w.stride(0)) * elem;
    t.box[0] = kPacked ? kWg4RawRowBytes : W::kBK;
    t.box[1] = W::kBoxRows;
    t.box[2] = 1;
    return t;
  };
  return {activations(c.xy, c.Hx), weights(ex.gate_up), activations(c.h, c.I), weights(ex.down)};
}

template <class W>
bool maps_ok(const WgmmaExpertsArgs& c) {
  const StepMaps m = step_maps<W>(c);
  for (const TensorMapBf16* t : {&m.gu_a, &m.gu_b, &m.dn_a, &m.dn_b})
    if (*tensor_map_refusal(*t)) return false;
  return true;
}

// Every dimension at least its box (the TMA boxes never exceed the tensor they read).
bool shapes_ok(const WgmmaExpertsArgs& c) {
  return c.I >= kWgBK && c.Hx >= kWgBoxRows && c.pairs >= kWgBM && c.pairs <= INT32_MAX && c.E >= 1 &&
         c.E <= kWgMaxExperts;
}

// opt_in_smem: once per device, per policy and kernel (gate_up, down)
template <class W>
std::atomic<uint64_t> g_smem[2];

template <class W>
Status run_expert_gemms(const WgmmaExpertsArgs& c, const CudaContext& cx) {
  constexpr bool kPacked = W::kDequant, kCodes = W::kFp8 || W::kChannel;
  const char* const kWhat = W::kName;
  const backend::MoeExpertsArgs& a = *c.args;
  const backend::ExpertWeights& ex = *a.experts;
  const StepMaps m = step_maps<W>(c);
  RILL_ASSIGN_OR_RETURN(const CUtensorMap gu_a,
                        make_tensor_map(m.gu_a, "moe_experts (wgmma): x in expert order"));
  RILL_ASSIGN_OR_RETURN(const CUtensorMap gu_b,
                        make_tensor_map(m.gu_b, "moe_experts (wgmma): gate_up weights"));
  RILL_ASSIGN_OR_RETURN(const CUtensorMap dn_a, make_tensor_map(m.dn_a, "moe_experts (wgmma): activations"));
  RILL_ASSIGN_OR_RETURN(const CUtensorMap dn_b, make_tensor_map(m.dn_b, "moe_experts (wgmma): down weights"));
  auto* gate_up = moe_grouped_wgmma_kernel<W, true>;
  auto* down = moe_grouped_wgmma_kernel<W, false>;
  RILL_TRY(opt_in_smem(kWhat, reinterpret_cast<const void*>(gate_up), W::kSmemBytes, cx, &g_smem<W>[0]));
  RILL_TRY(opt_in_smem(kWhat, reinterpret_cast<const void*>(down), W::kSmemBytes, cx, &g_smem<W>[1]));
  if constexpr (kCodes) {
    // x quantised straight into expert order (slot s from token slot_token[s]); no bf16 copy of the gathered
    // rows (H100, 8K tokens: the gather's 0.18 ms and the quantisation's 0.20 ms a layer became 0.24 ms).
    RILL_TRY(launch_fp8_quantize_gathered_rows(a.x.data, a.x.stride(0), c.slot_token, c.expert_offsets + c.E,
                                               c.pairs, c.Hx, c.codes, c.a_scales, W::kActScaling,
                                               cx.stream));
  } else {
    RILL_TRY(launch_gather_rows(a, c.slot_token, c.expert_offsets, c.E, c.Hx, c.pairs, c.xy, cx.stream));
  }

  WgmmaGemmParams p{};
  p.expert_offsets = c.expert_offsets;
  p.tile_offsets = c.tile_offsets;
  p.n_experts = c.E;
  p.act = a.activation == backend::Activation::Silu ? Act::Silu : Act::Situ;
  p.beta = a.beta;
  p.linear_beta = a.linear_beta;
  p.pairs = c.pairs;
  p.a_scales = c.a_scales;
  // Persistent grids: one CTA per SM (the shared memory allows one), fewer when the step has fewer items.
  auto shape = [&](int n_tiles) {
    const int64_t items = int64_t(c.max_tiles) * n_tiles;
    return LaunchShape{dim3(unsigned(std::max<int64_t>(1, std::min<int64_t>(cx.sm_count, items)))),
                       dim3(kWgThreads), size_t(W::kSmemBytes)};
  };
  auto set_scales = [&](const TensorView& scales) {
    if constexpr (kPacked) {
      p.w_scales = static_cast<const uint8_t*>(scales.data);
      p.s_expert_stride = scales.stride(0);
      p.lds = scales.stride(1);
    } else if constexpr (kCodes) {
      p.fp8_w_scales = static_cast<const float*>(scales.data);
      p.ws_expert_stride = scales.stride(0);
      p.ws_ld = scales.stride(1);
    }
  };

  p.k = c.Hx;
  p.n = c.I;
  p.n_tiles = (c.I + W::tile_cols(true) - 1) / W::tile_cols(true);
  p.b_second = c.I;  // the up rows of the same columns
  p.b_rows = 2 * c.I;
  p.out = c.h;
  p.ldo = c.I;
  set_scales(ex.gate_up_scales);
  RILL_TRY(launch(W::kGateUpName, shape(p.n_tiles), cx.stream, gate_up, gu_a, gu_b, p));
  if constexpr (kCodes)
    RILL_TRY(
        launch_fp8_quantize_rows(c.h, c.I, c.pairs, c.I, c.codes, c.a_scales, W::kActScaling, cx.stream));

  p.k = c.I;
  p.n = c.Hx;
  p.n_tiles = (c.Hx + W::tile_cols(false) - 1) / W::tile_cols(false);
  p.b_second = W::kBoxRows;  // the next box's rows
  p.b_rows = c.Hx;
  p.out = c.xy;
  p.ldo = c.Hx;
  set_scales(ex.down_scales);
  return launch(W::kDownName, shape(p.n_tiles), cx.stream, down, dn_a, dn_b, p);
}

}  // namespace

bool wgmma_device_supported(const CudaContext& cx) {
#if defined(RILL_CUDA_SM90A)
  return cx.cc_major == 9 && cx.cc_minor == 0 && cx.max_smem_per_block >= size_t(kWgSmemBytes) &&
         tensor_map_encoder_ready().ok();
#else
  (void)cx;
  return false;
#endif
}

bool wgmma_experts_supported(const WgmmaExpertsArgs& c, const CudaContext& cx) {
  return wgmma_device_supported(cx) && shapes_ok(c) && maps_ok<Bf16Weights>(c);
}

Status run_expert_gemms_wgmma(const WgmmaExpertsArgs& c, const CudaContext& cx) {
  return run_expert_gemms<Bf16Weights>(c, cx);
}

bool wgmma_mxfp4_experts_supported(const WgmmaExpertsArgs& c, const CudaContext& cx) {
  const backend::ExpertWeights& ex = *c.args->experts;
  // Whole 64-code k steps (a stage reads two scale groups of every row), contiguous code and scale rows.
  if (ex.format != backend::WeightFormat::Mxfp4 || c.Hx % kWgBK != 0 || c.I % kWgBK != 0) return false;
  for (const TensorView* v : {&ex.gate_up, &ex.gate_up_scales, &ex.down, &ex.down_scales})
    if (v->dtype != DType::U8 || v->rank() != 3 || v->stride(2) != 1) return false;
  return wgmma_device_supported(cx) && cx.max_smem_per_block >= size_t(kWg4SmemBytes) && shapes_ok(c) &&
         maps_ok<Mxfp4Weights>(c);
}

Status run_expert_gemms_wgmma_mxfp4(const WgmmaExpertsArgs& c, const CudaContext& cx) {
  return run_expert_gemms<Mxfp4Weights>(c, cx);
}

namespace {

// FP8 experts: 128 x 128 block scales (Fp8Weights) or one scale per weight row (Fp8ChannelWeights).
enum class Fp8Policy { None, Blocks, Channels };
Fp8Policy wgmma_fp8_policy(const WgmmaExpertsArgs& c, const CudaContext& cx) {
  if (!wgmma_device_supported(cx)) return Fp8Policy::None;
  const backend::ExpertWeights& ex = *c.args->experts;
  if (ex.format != backend::WeightFormat::Fp8 || ex.gate_up.dtype != DType::F8E4M3 ||
      ex.down.dtype != DType::F8E4M3 || ex.gate_up.stride(2) != 1 || ex.down.stride(2) != 1)
    return Fp8Policy::None;
  if (c.I % kWg8ScaleBlock != 0 || c.Hx % kWg8ScaleBlock != 0 || !c.codes || !c.a_scales ||
      c.args->x.stride(0) % 8 != 0)
    return Fp8Policy::None;  // (x's rows 16-byte aligned: the quantisation's loads)
  // F32 [E, rows / block rows, k blocks] scales with contiguous rows.
  auto scales_ok = [&](const TensorView& s, int64_t rows, int64_t k_blocks) {
    return s.dtype == DType::F32 && s.rank() == 3 && s.size(0) == c.E && s.size(1) == rows &&
           s.size(2) == k_blocks && (s.size(2) <= 1 || s.stride(2) == 1);
  };
  if (ex.block.rows == kWg8ScaleBlock && ex.block.cols == kWg8ScaleBlock) {
    const bool ok = cx.max_smem_per_block >= size_t(kWg8SmemBytes) &&
                    scales_ok(ex.gate_up_scales, 2 * c.I / kWg8ScaleBlock, c.Hx / kWg8ScaleBlock) &&
                    scales_ok(ex.down_scales, c.Hx / kWg8ScaleBlock, c.I / kWg8ScaleBlock) && shapes_ok(c) &&
                    maps_ok<Fp8Weights>(c);
    return ok ? Fp8Policy::Blocks : Fp8Policy::None;
  }
  if (ex.block.rows == 1 && ex.block.cols >= std::max(c.Hx, c.I)) {
    // (one scale a row, contiguous and 8-byte aligned: the epilogue loads two adjacent rows' at once)
    auto rows_contiguous = [](const TensorView& s) {
      return s.stride(1) == 1 && s.stride(0) % 2 == 0 && reinterpret_cast<uintptr_t>(s.data) % 8 == 0;
    };
    const bool ok = scales_ok(ex.gate_up_scales, 2 * c.I, 1) && scales_ok(ex.down_scales, c.Hx, 1) &&
                    rows_contiguous(ex.gate_up_scales) && rows_contiguous(ex.down_scales) && shapes_ok(c) &&
                    maps_ok<Fp8ChannelWeights>(c);
    return ok ? Fp8Policy::Channels : Fp8Policy::None;
  }
  return Fp8Policy::None;
}

}  // namespace

bool wgmma_fp8_experts_supported(const WgmmaExpertsArgs& c, const CudaContext& cx) {
  return wgmma_fp8_policy(c, cx) != Fp8Policy::None;
}

Status run_expert_gemms_wgmma_fp8(const WgmmaExpertsArgs& c, const CudaContext& cx) {
  switch (wgmma_fp8_policy(c, cx)) {
    case Fp8Policy::Blocks:
      return run_expert_gemms<Fp8Weights>(c, cx);
    case Fp8Policy::Channels:
      return run_expert_gemms<Fp8ChannelWeights>(c, cx);
    case Fp8Policy::None:
      break;
  }
  return invalid_argument("moe_experts (wgmma, FP8): these experts' scales or shapes are not supported");
}

}  // namespace rill::cuda::moe
