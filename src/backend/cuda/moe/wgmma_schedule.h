// The index arithmetic of the Hopper grouped expert GEMM (grouped_wgmma.cu), host and device: tile sizes, the
// persistent CTAs' work items, the shared-memory layout TMA writes (128-byte swizzle), the wgmma matrix
// descriptor and the m64nNk16 accumulator layout. No CUDA headers, so the CPU test binary checks every
// function here against brute force (tests/backend/cpu/moe_wgmma_schedule_test.cc).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define RILL_MOE_HD __host__ __device__
#else
#define RILL_MOE_HD
#endif

namespace rill::cuda::moe {

// Tiles: 128 slots (two consumer warpgroups of 64 rows) x 256 weight rows x 64 k per stage (one 128-byte
// swizzle row of bf16), 4 stages of A 16 KiB + B 32 KiB. 384 threads: warpgroup 0 loads (one thread issues
// TMA), warpgroups 1-2 compute m64n256k16. gate_up's B tile is 128 gate rows then the 128 up rows of the same
// columns, so a tile covers 128 columns of I; down's covers 256 columns of Hx.
constexpr int kWgBM = 128, kWgBN = 256, kWgBK = 64, kWgStages = 4, kWgThreads = 384;
constexpr int kWgConsumerRows = 64;   // rows of A per consumer warpgroup (wgmma's M)
constexpr int kWgBoxRows = 128;       // rows of one TMA box (A: a whole tile; B: half of one)
constexpr int kWgSwizzleBytes = 128;  // a 128B-swizzled row: kWgBK bf16
constexpr int kWgAStageBytes = kWgBM * kWgBK * 2, kWgBStageBytes = kWgBN * kWgBK * 2;
constexpr int kWgStageBytes = kWgAStageBytes + kWgBStageBytes;  // what one stage's TMA loads complete
// Dynamic shared memory: 1024-byte aligned stages (the swizzle pattern repeats every 8 rows of 128 bytes, and
// the descriptors' base offset is 0), then 2 * kWgStages mbarriers, then the plan's slot and tile offsets (E
// + 1 each, up to kWgMaxExperts; copied once per CTA so the work-item search reads shared memory); +1024 for
// aligning the dynamic base.
constexpr int kWgMaxExperts = 1024;  // moe/params.h kMaxExperts
constexpr int kWgBarrierBytes = 2 * kWgStages * 8, kWgOffsetsBytes = 2 * (kWgMaxExperts + 1) * 4;
constexpr int kWgSmemBytes = kWgStages * kWgStageBytes + kWgBarrierBytes + kWgOffsetsBytes + 1024;
constexpr int kWgAccRegs = kWgBN / 2;  // fp32 accumulators per consumer thread (64 x 256 over 128 threads)

// Output columns one work item covers: gate_up 128 (gate and up of each), down 256.
RILL_MOE_HD constexpr int wgmma_tile_cols(bool gate_up) {
  return gate_up ? kWgBN / 2 : kWgBN;
}

// 128-slot tiles of an expert with `count` slots (the plan kernel's scan of these gives the tile offsets).
RILL_MOE_HD constexpr int wgmma_tiles(int count) {
  return (count + kWgBM - 1) / kWgBM;
}

// One work item of a persistent CTA: expert e, its tile of slots starting at m0 (relative to the expert's
// first slot), output columns from n0.
struct WgmmaWork {
  int e, m0, n0;
};

// Work item `item` in [0, tile_offsets[E] * n_tiles): m-tile major, the n_tiles column tiles of one (expert,
// m-tile) consecutive, so CTAs running at once share the A tile and read one expert's weights while they are
// in L2. tile_offsets[e]: expert e's first 128-slot tile (an exclusive scan; experts without slots repeat
// the next offset). The expert is the last e whose first tile is <= the m-tile (binary search).
RILL_MOE_HD inline WgmmaWork wgmma_work(int item, int n_tiles, int tile_cols, const int32_t* tile_offsets,
                                        int n_experts) {
  const int mt = item / n_tiles, nt = item - mt * n_tiles;
  int lo = 0, hi = n_experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (tile_offsets[mid] <= mt)
      lo = mid;
    else
      hi = mid - 1;
  }
  return {lo, (mt - tile_offsets[lo]) * kWgBM, nt * tile_cols};
}

// Byte offset of element (row, col) of a bf16 tile with 128-byte rows in the 128B-swizzled layout TMA writes
// (CU_TENSOR_MAP_SWIZZLE_128B, tile base 1024-byte aligned): the 16-byte chunk index of the column is XORed
// with row % 8. wgmma reads the same layout through its descriptor (layout type 1).
RILL_MOE_HD constexpr uint32_t swizzle128_offset(int row, int col) {
  const uint32_t byte = uint32_t(col) * 2;
  return uint32_t(row) * kWgSwizzleBytes + ((((byte >> 4) ^ uint32_t(row & 7)) & 7) << 4) + (byte & 15);
}

// The wgmma shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address >> 4 in bits
// 0-13, leading-dimension byte offset >> 4 in bits 16-29, stride byte offset >> 4 in bits 32-45, base offset
// 0 in bits 49-51 (1024-byte aligned tiles), layout type in bits 62-63 (1: 128-byte swizzle). K-major
// operands in the 128B swizzle: SBO = 1024 (the next 8-row group), LBO unused (a k16 step stays inside a
// 128-byte row; set to 1), and stepping k by 16 inside the 64-element row adds 32 bytes to the start address.
constexpr uint32_t kWgSbo = 8 * kWgSwizzleBytes, kWgLbo = 16;
RILL_MOE_HD constexpr uint64_t wgmma_desc_sw128(uint32_t smem_addr) {
  return uint64_t((smem_addr & 0x3FFFF) >> 4) | (uint64_t(kWgLbo >> 4) << 16) |
         (uint64_t(kWgSbo >> 4) << 32) | (uint64_t(1) << 62);
}

// The expert weight row of B tile row `row` (0-255), which is also accumulator column `row` of the 64 x 256
// output: rows 0-127 are the first box's, from n0; rows 128.. the second box's, from n0 + b_second (gate_up:
// b_second = I, the up rows of the same columns; down: 128, the next rows).
RILL_MOE_HD constexpr int wgmma_tile_weight_row(int row, int n0, int b_second) {
  return row < kWgBoxRows ? n0 + row : n0 + b_second + (row - kWgBoxRows);
}

// Where accumulator register i (0 .. N/2 - 1) of lane `lane` in warp `warp` (0-3 of its warpgroup) sits in
// the 64 x N output of wgmma m64nNk16 with fp32 accumulators (PTX ISA, "Register Fragments and Shared Memory
// Matrix Layouts" for wgmma D): n8 block j = i / 4, c = i % 4; row 16 warp + lane / 4 (+ 8 for c >= 2),
// column 8 j + 2 (lane % 4) + c % 2.
struct WgmmaAccPos {
  int row, col;
};
RILL_MOE_HD constexpr WgmmaAccPos wgmma_acc_pos(int warp, int lane, int i) {
  const int j = i >> 2, c = i & 3;
  return {16 * warp + (lane >> 2) + 8 * (c >> 1), 8 * j + 2 * (lane & 3) + (c & 1)};
}

// ------------------------------------------------------------------------------------------ FP8 variant
// grouped_wgmma.cu Fp8Weights: E4M3 operands, one 128-byte swizzle row = 128 codes = one 128-column scale
// block per stage (BK 128). The tile is 128 slots x 128 weight rows (two 64-row TMA boxes of B) x 128 k; each
// consumer warpgroup runs m64n128k32 into a block accumulator (64 registers) and promotes it into its fp32
// main one (64 registers): main += blk * a_scale[row][kb] * w_scale[e][row block][kb]. gate_up's tile is 64
// gate rows then the 64 up rows of the same output columns (64 columns of I), down's 128 weight rows (128 of
// Hx); both need I and Hx multiples of 128, so a tile never straddles a weight scale block and every k block
// is whole.
constexpr int kWg8BK = 128, kWg8BN = 128, kWg8Stages = 6;
constexpr int kWg8BoxRows = 64;  // rows of one B box (A boxes stay kWgBoxRows = 128 slots)
constexpr int kWg8AStageBytes = kWgBM * kWg8BK, kWg8BStageBytes = kWg8BN * kWg8BK;
constexpr int kWg8StageBytes = kWg8AStageBytes + kWg8BStageBytes;
constexpr int kWg8BarrierBytes = 2 * kWg8Stages * 8;
constexpr int kWg8SmemBytes = kWg8Stages * kWg8StageBytes + kWg8BarrierBytes + kWgOffsetsBytes + 1024;
constexpr int kWg8AccRegs = kWg8BN / 2;  // per accumulator (block and main): 64 x 128 over 128 threads
constexpr int kWg8ScaleBlock = 128;      // activations' and weights' scale blocks (128 x 128 weights only)

// Output columns one FP8 work item covers: gate_up 64 (gate and up of each), down 128.
RILL_MOE_HD constexpr int wgmma_fp8_tile_cols(bool gate_up) {
  return gate_up ? kWg8BN / 2 : kWg8BN;
}

// The weight row where B box `box` (0 or 1) of the FP8 tile at output column n0 starts: gate_up box 0 the
// gate rows n0.., box 1 the up rows I + n0..; down box 0 the rows n0.., box 1 n0 + 64...
RILL_MOE_HD constexpr int wgmma_fp8_b_row(bool gate_up, int n0, int I, int box) {
  return gate_up ? box * I + n0 : n0 + box * kWg8BoxRows;
}

// The weight scale block row (of the [E, rows / 128, K / 128] scales) of B box `box`: a box's 64 rows never
// straddle a 128-row block (n0 is a multiple of 64, I of 128).
RILL_MOE_HD constexpr int wgmma_fp8_w_scale_row(bool gate_up, int n0, int I, int box) {
  return wgmma_fp8_b_row(gate_up, n0, I, box) / kWg8ScaleBlock;
}

// Which B box accumulator register i (0 .. kWg8AccRegs - 1) of m64n128 multiplies: n8 block j = i / 4 reads
// weight rows 8j.., box 0 for j < 8 (columns 0-63 of the tile), box 1 after.
RILL_MOE_HD constexpr int wgmma_fp8_acc_box(int i) {
  return (i >> 2) >= kWg8BN / 16 ? 1 : 0;
}

// The activation scale of slot `slot` and k block kb in the [K / 128, pairs] scales (gemm/fp8_native.h's
// x_scales layout): slot-major within a k block, so a warp's rows read adjacent floats.
RILL_MOE_HD constexpr int64_t wgmma_fp8_a_scale_index(int64_t slot, int kb, int64_t pairs) {
  return int64_t(kb) * pairs + slot;
}

// ---------------------------------------------------------------------------- per-channel FP8 variant
// grouped_wgmma.cu Fp8ChannelWeights (FP8 experts with one scale per weight row, `--quantization ptpc_fp8` or
// a compressed-tensors "channel" checkpoint): the bf16 kernel's tile in bytes — 128 slots x 256 weight rows x
// 128 E4M3 codes a stage (one 128-byte swizzle row, as bf16's 64), four wgmma m64n256k32 a stage — and, with
// no scale inside K, one accumulator over all of K: the epilogue multiplies accumulator (row, col) by the
// slot's activation scale (the activations quantised per slot over the whole row: scales [pairs]) and the
// weight scale of wgmma_tile_weight_row(col, n0, b_second).
constexpr int kWgChannelBK = 128;  // E4M3 codes a stage: one swizzle row

// ---------------------------------------------------------------------------------------- MXFP4 variant
// grouped_wgmma.cu's Mxfp4 policy (W4A16: bf16 activations, K3's MXFP4 experts): the bf16 kernel's tile (128
// slots x 256 weight rows x 64 k), A boxes and epilogue. B arrives as packed FP4 codes: per stage TMA brings
// A and 256 weight rows x 32 bytes of codes (64 codes, low nibble = even column; no swizzle) into a ring of
// kWg4Stages, and the consumer warpgroups themselves (kWg4DequantThreads: both, two units a thread) write
// them into one of kWg4BBuffers bf16 B tiles as bf16 times the row's E8M0 scale of each 32-column group, in
// the 128-byte swizzle TMA would have written (swizzle128_offset), so wgmma reads them as it reads the bf16
// kernel's. A step's dequantisation runs while the tensor cores work through the step before it. Three B
// tiles: the tile step g writes was last read by step g - 3's wgmmas, which both warpgroups waited for before
// meeting at step g - 1's barrier (two would need a second barrier a step). (Three dequantising warps of the
// producer warpgroup, the first form, left the consumers waiting 55-63% of the time: docs/PERF.md.)
constexpr int kWg4Stages = 5, kWg4BBuffers = 3;
constexpr int kWg4RawRowBytes = kWgBK / 2;                     // 64 codes
constexpr int kWg4RawStageBytes = kWgBN * kWg4RawRowBytes;     // 8 KiB
constexpr int kWg4RawBoxBytes = kWgBoxRows * kWg4RawRowBytes;  // one 128-row box: 4 KiB
constexpr int kWg4DequantThreads = 256;
constexpr int kWg4Group = 32;                           // columns per E8M0 scale
constexpr int kWg4Units = kWgBN * (kWgBK / kWg4Group);  // a unit: one row's scale group in one stage
constexpr int kWg4BarrierBytes = 2 * kWg4Stages * 8;
// Shared memory: the A stages, the B tiles (both 1024-byte aligned), the raw ring, the barriers, the offsets.
constexpr int kWg4SmemBytes = kWg4Stages * kWgAStageBytes + kWg4BBuffers * kWgBStageBytes +
                              kWg4Stages * kWg4RawStageBytes + kWg4BarrierBytes + kWgOffsetsBytes + 1024;

// Dequantising unit u (0 .. kWg4Units - 1) of a stage: B row `row` (0-255 of the tile: rows 128.. are the
// second box) and scale group `group` (columns 32 group .. 32 group + 31 of the stage). Dequantising thread t
// takes units t and t + kWg4DequantThreads: a warp reads 512 consecutive raw bytes, and each of its 16-byte
// stores covers every bank once (chunks 4 group + c of 4 rows in turn, XOR row % 8).
struct Mxfp4Unit {
  int row, group;
};
RILL_MOE_HD constexpr Mxfp4Unit wgmma_mxfp4_unit(int u) {
  return {u >> 1, u & 1};
}
// Its 16 packed bytes in the raw stage (rows of 32 bytes as TMA wrote them).
RILL_MOE_HD constexpr uint32_t wgmma_mxfp4_raw_offset(Mxfp4Unit w) {
  return uint32_t(w.row) * kWg4RawRowBytes + uint32_t(w.group) * 16;
}
// Where bf16 columns 8c .. 8c + 7 (c = 0..3) of its 32 go in the stage's B tile (one 16-byte chunk).
RILL_MOE_HD constexpr uint32_t wgmma_mxfp4_chunk_offset(Mxfp4Unit w, int c) {
  return swizzle128_offset(w.row, w.group * kWg4Group + 8 * c);
}
// The index of a unit's scale byte for k step kt in the expert's [rows, K / 32] scales (its row:
// wgmma_tile_weight_row).
RILL_MOE_HD constexpr int wgmma_mxfp4_scale_col(int kt, int group) {
  return kt * (kWgBK / kWg4Group) + group;
}

}  // namespace rill::cuda::moe
