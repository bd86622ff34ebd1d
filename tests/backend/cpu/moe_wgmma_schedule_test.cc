// The index arithmetic of the Hopper grouped expert GEMM (src/backend/cuda/moe/wgmma_schedule.h), on the
// host: the kernel runs the same functions on the device, where no test can see them one by one. Work items
// against a brute-force enumeration over random per-expert slot counts (zeros, single slots and several
// tiles), the matrix descriptor against its closed form, the 128-byte swizzle as a bijection with the XOR
// rule, the wgmma accumulator map as a bijection onto the 64 x N tile with the pairs the epilogue stores
// together, and the FP8 and MXFP4 policies' tiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/moe/wgmma_schedule.h"
#include "test_seed.h"

namespace rill::cuda::moe {
namespace {

// Every (expert, m0, n0) of a step in the kernel's order: m-tile major, experts in order, column tiles inner.
std::vector<std::tuple<int, int, int>> brute_force_items(const std::vector<int>& counts, int n,
                                                         int tile_cols) {
  std::vector<std::tuple<int, int, int>> items;
  for (size_t e = 0; e < counts.size(); ++e)
    for (int m0 = 0; m0 < counts[e]; m0 += kWgBM)
      for (int n0 = 0; n0 < n; n0 += tile_cols) items.emplace_back(int(e), m0, n0);
  return items;
}

// The plan kernel's exclusive scan of 128-slot tiles (experts/E + 1 entries).
std::vector<int32_t> tile_offsets(const std::vector<int>& counts) {
  std::vector<int32_t> off(counts.size() + 1, 0);
  for (size_t e = 0; e < counts.size(); ++e) off[e + 1] = off[e] + wgmma_tiles(counts[e]);
  return off;
}

void check_schedule(const std::vector<int>& counts, int n, bool gate_up, bool fp8 = false) {
  const int cols = fp8 ? wgmma_fp8_tile_cols(gate_up) : wgmma_tile_cols(gate_up),
            n_tiles = (n + cols - 1) / cols;
  const std::vector<int32_t> off = tile_offsets(counts);
  const auto expected = brute_force_items(counts, n, cols);
  const int n_items = off.back() * n_tiles;
  ASSERT_EQ(size_t(n_items), expected.size());
  for (int item = 0; item < n_items; ++item) {
    const WgmmaWork w = wgmma_work(item, n_tiles, cols, off.data(), int(counts.size()));
    ASSERT_EQ(std::make_tuple(w.e, w.m0, w.n0), expected[size_t(item)]) << "item " << item;
    ASSERT_LT(w.m0, counts[size_t(w.e)]) << "a tile starts past its expert's slots";
  }
}

TEST(MoeWgmmaSchedule, WorkItemsMatchBruteForce) {
  const uint32_t seed = rill::testing::test_seed();  // RILL_TEST_SEED replays
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int round = 0; round < 200; ++round) {
    const int E = std::uniform_int_distribution<int>(1, 300)(rng);
    std::vector<int> counts(static_cast<size_t>(E));
    const int shape = round % 4;  // empty-heavy, single slots, several tiles, mixed
    for (int& c : counts) {
      const int r = std::uniform_int_distribution<int>(0, 99)(rng);
      c = shape == 0   ? (r < 80 ? 0 : r)
          : shape == 1 ? (r < 50 ? 1 : 0)
          : shape == 2 ? std::uniform_int_distribution<int>(0, 700)(rng)
                       : (r < 30   ? 0
                          : r < 45 ? 1
                          : r < 60 ? kWgBM
                          : r < 75 ? kWgBM + 1
                                   : r * 7);
    }
    if (round % 10 == 0) std::fill(counts.begin(), counts.end() - 1, 0);  // all slots in the last expert
    const int n = std::uniform_int_distribution<int>(8, 2400)(rng) / 8 * 8;
    SCOPED_TRACE("round " + std::to_string(round) + " E " + std::to_string(E) + " n " + std::to_string(n));
    check_schedule(counts, n, true);
    check_schedule(counts, n, false);
    const int n128 = std::max(128, n / 128 * 128);  // the FP8 kernel's widths: multiples of 128
    check_schedule(counts, n128, true, true);
    check_schedule(counts, n128, false, true);
  }
  check_schedule(std::vector<int>(7, 0), 1024, true);  // no slots at all: no items
}

TEST(MoeWgmmaSchedule, KimiLinearShapeItems) {
  // 8192 tokens x top-8 spread evenly over 256 experts: 256 slots each, 2 tiles; I = 1024 and Hx = 2304.
  const std::vector<int> counts(256, 256);
  check_schedule(counts, 1024, true);
  check_schedule(counts, 2304, false);
  const std::vector<int32_t> off = tile_offsets(counts);
  EXPECT_EQ(off.back() * (1024 / wgmma_tile_cols(true)), 512 * 8);
  EXPECT_EQ(off.back() * ((2304 + kWgBN - 1) / kWgBN), 512 * 9);
}

TEST(MoeWgmmaSchedule, DescriptorBits) {
  // start >> 4 in bits 0-13, LBO 16 >> 4 = 1 in bits 16-29, SBO 1024 >> 4 = 64 in bits 32-45, 128B swizzle
  // (1) in bits 62-63, base offset 0.
  const uint64_t fixed = (uint64_t(1) << 16) | (uint64_t(64) << 32) | (uint64_t(1) << 62);
  EXPECT_EQ(wgmma_desc_sw128(0), fixed);
  EXPECT_EQ(wgmma_desc_sw128(1024), fixed | 64);
  EXPECT_EQ(wgmma_desc_sw128(0x2a400 + 32), fixed | ((0x2a400 + 32) >> 4));
  EXPECT_EQ(wgmma_desc_sw128(0x3fff0), fixed | 0x3fff);  // the largest 14-bit start
  for (uint32_t a = 0; a < (1u << 18); a += 16) {
    const uint64_t d = wgmma_desc_sw128(a);
    ASSERT_EQ(d & 0x3fff, a >> 4);
    ASSERT_EQ((d >> 16) & 0x3fff, 1u);
    ASSERT_EQ((d >> 32) & 0x3fff, 64u);
    ASSERT_EQ((d >> 49) & 7, 0u);
    ASSERT_EQ(d >> 62, 1u);
    ASSERT_EQ(
        d & ~(uint64_t(0x3fff) | (uint64_t(0x3fff) << 16) | (uint64_t(0x3fff) << 32) | (uint64_t(3) << 62)),
        0u);
  }
  // A k16 step inside the 128-byte row moves the start by 32 bytes: field + 2.
  EXPECT_EQ(wgmma_desc_sw128(4096 + 3 * 32) - wgmma_desc_sw128(4096), 6u);
}

TEST(MoeWgmmaSchedule, Swizzle128IsTheXorOfRowIntoChunk) {
  // A 1024-byte-aligned tile of R rows x 64 bf16: every element gets its own byte pair, inside its row, and
  // the address bits 4-6 are the logical chunk XOR bits 7-9 (the row within the 8-row pattern).
  constexpr int kRows = 256;
  std::vector<int> seen(size_t(kRows) * kWgSwizzleBytes, 0);
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kWgBK; ++c) {
      const uint32_t off = swizzle128_offset(r, c);
      ASSERT_EQ(off % 2, 0u);
      ASSERT_EQ(off / kWgSwizzleBytes, uint32_t(r)) << "stays in its row";
      const uint32_t logical = uint32_t(r) * kWgSwizzleBytes + uint32_t(c) * 2;
      ASSERT_EQ(off, logical ^ (((logical >> 7) & 7) << 4)) << "row " << r << " col " << c;
      ASSERT_EQ(seen[off]++, 0) << "two elements at byte " << off;
    }
  // Columns 8t .. 8t + 7 (one 16-byte chunk) stay together: TMA and wgmma move whole chunks.
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < kWgBK; ++c)
      ASSERT_EQ(swizzle128_offset(r, c) - swizzle128_offset(r, c & ~7), uint32_t(c & 7) * 2);
  EXPECT_EQ(swizzle128_offset(1, 0), 128u + 16u);
  EXPECT_EQ(swizzle128_offset(7, 63), 7u * 128 + ((7u ^ 7u) << 4) + 14);
}

TEST(MoeWgmmaSchedule, AccumulatorMapIsABijection) {
  for (int n : {256, 128, 64, 8}) {
    SCOPED_TRACE("N " + std::to_string(n));
    std::vector<int> seen(size_t(64 * n), 0);
    for (int warp = 0; warp < 4; ++warp)
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < n / 2; ++i) {
          const WgmmaAccPos p = wgmma_acc_pos(warp, lane, i);
          ASSERT_GE(p.row, 16 * warp);
          ASSERT_LT(p.row, 16 * warp + 16) << "a warp owns its 16 rows";
          ASSERT_GE(p.col, 0);
          ASSERT_LT(p.col, n);
          ASSERT_EQ(seen[size_t(p.row * n + p.col)]++, 0)
              << "warp " << warp << " lane " << lane << " i " << i;
          if (i % 2 == 0) {  // the epilogue stores registers i, i + 1 as one bf16 pair
            const WgmmaAccPos q = wgmma_acc_pos(warp, lane, i + 1);
            ASSERT_EQ(q.row, p.row);
            ASSERT_EQ(q.col, p.col + 1);
            ASSERT_EQ(p.col % 2, 0);
          }
        }
  }
  // gate_up: register i < 64 (columns 0-127: gate) and i + 64 (columns 128-255: up) are the same output
  // column.
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < kWgAccRegs / 2; ++i) {
      const WgmmaAccPos g = wgmma_acc_pos(1, lane, i), u = wgmma_acc_pos(1, lane, i + kWgAccRegs / 2);
      ASSERT_LT(g.col, kWgBN / 2);
      ASSERT_EQ(u.row, g.row);
      ASSERT_EQ(u.col, g.col + kWgBN / 2);
    }
  EXPECT_EQ(wgmma_acc_pos(0, 0, 0).row, 0);
  EXPECT_EQ(wgmma_acc_pos(3, 31, 127).row, 16 * 3 + 7 + 8);
  EXPECT_EQ(wgmma_acc_pos(3, 31, 127).col, 8 * 31 + 6 + 1);
}

TEST(MoeWgmmaSchedule, SharedMemoryFitsAndAligns) {
  EXPECT_EQ(kWgAStageBytes % 1024, 0);
  EXPECT_EQ(kWgBStageBytes % 1024, 0);
  EXPECT_EQ(kWgBStageBytes / 2 % 1024, 0) << "B's second box starts on a swizzle pattern boundary";
  EXPECT_EQ(kWgConsumerRows * kWgSwizzleBytes % 1024, 0) << "the second consumer's A rows too";
  EXPECT_LE(kWgSmemBytes, 227 * 1024) << "H100 / H200 opt-in limit per block";
  EXPECT_EQ(kWgStageBytes, (kWgBM + kWgBN) * kWgBK * 2);
}

// The FP8 policy (grouped_wgmma.cu Fp8Weights): 64-column gate_up and 128-column down
// tiles at the 48B shape, the weight rows and scale block of each B box against brute force, the n128
// accumulators' box, and the shared memory of 6 stages of 32 KiB.
TEST(MoeWgmmaSchedule, Fp8TilesScaleBlocksAndAccumulators) {
  const std::vector<int> counts(256, 256);
  check_schedule(counts, 1024, true, true);
  check_schedule(counts, 2304, false, true);
  EXPECT_EQ(tile_offsets(counts).back() * (1024 / wgmma_fp8_tile_cols(true)), 512 * 16);
  EXPECT_EQ(tile_offsets(counts).back() * (2304 / wgmma_fp8_tile_cols(false)), 512 * 18);
  for (int I : {128, 256, 1024, 2048})
    for (bool gate_up : {true, false}) {
      const int n = gate_up ? I : 2304, cols = wgmma_fp8_tile_cols(gate_up);
      for (int n0 = 0; n0 < n; n0 += cols)
        for (int box = 0; box < 2; ++box) {
          const int row0 = wgmma_fp8_b_row(gate_up, n0, I, box);
          // The one body's Fp8Weights (grouped_wgmma.cu) loads box `box` at n0 + box * b_second (b_second: I
          // for gate_up, a box for down) and reads its scale row with b_second in I's place.
          const int b_second = gate_up ? I : kWg8BoxRows;
          ASSERT_EQ(n0 + box * b_second, row0) << "I " << I << " n0 " << n0;
          ASSERT_EQ(wgmma_fp8_w_scale_row(gate_up, n0, b_second, box),
                    wgmma_fp8_w_scale_row(gate_up, n0, I, box));
          // Brute force: tile row r (0-127) of box r / 64 is the weight row of output column n0 + r % 64
          // (gate_up: gate for box 0, up for box 1) or n0 + r (down).
          for (int r = box * kWg8BoxRows; r < (box + 1) * kWg8BoxRows; ++r) {
            const int want = gate_up ? (r < 64 ? n0 + r : I + n0 + r - 64) : n0 + r;
            ASSERT_EQ(row0 + r - box * kWg8BoxRows, want) << "I " << I << " n0 " << n0 << " r " << r;
            ASSERT_EQ(wgmma_fp8_w_scale_row(gate_up, n0, I, box), want / 128) << "a box inside one block";
          }
        }
    }
  // m64n128: registers 0-31 (n8 blocks 0-7) are columns 0-63 (box 0), 32-63 columns 64-127 (box 1); gate_up
  // pairs register i with i + 32 (the same output column, gate and up).
  for (int warp = 0; warp < 4; ++warp)
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < kWg8AccRegs; ++i) {
        const WgmmaAccPos p = wgmma_acc_pos(warp, lane, i);
        ASSERT_LT(p.col, kWg8BN);
        ASSERT_EQ(wgmma_fp8_acc_box(i), p.col / kWg8BoxRows) << "lane " << lane << " i " << i;
        if (i < kWg8AccRegs / 2) {
          const WgmmaAccPos u = wgmma_acc_pos(warp, lane, i + kWg8AccRegs / 2);
          ASSERT_EQ(u.row, p.row);
          ASSERT_EQ(u.col, p.col + kWg8BN / 2);
        }
      }
  EXPECT_EQ(wgmma_fp8_a_scale_index(5, 0, 100), 5);
  EXPECT_EQ(wgmma_fp8_a_scale_index(5, 3, 100), 305);
  EXPECT_EQ(kWg8AStageBytes % 1024, 0);
  EXPECT_EQ(kWg8BStageBytes / 2 % 1024, 0) << "B's second box starts on a swizzle pattern boundary";
  EXPECT_EQ(kWg8BK, kWg8ScaleBlock) << "one stage row is one scale block of codes";
  EXPECT_EQ(kWg8BK, kWgSwizzleBytes) << "128 E4M3 codes are one 128-byte swizzle row";
  EXPECT_LE(kWg8SmemBytes, 227 * 1024) << "H100 / H200 opt-in limit per block";
}

// The MXFP4 policy (grouped_wgmma.cu Mxfp4Weights): the consumer threads' units cover every (row, scale
// group) of a stage once; a unit's raw bytes are where TMA's two unswizzled 128-row boxes put them; its four
// bf16 chunks are the ones TMA's 128-byte swizzle would have written for those columns (the XOR of address
// bits 7-9 into bits 4-6, from the tile's 1024-byte aligned base); each 16-byte store of a warp touches every
// bank once per 8-thread phase; the weight rows and scale bytes against their closed forms.
TEST(MoeWgmmaSchedule, Mxfp4UnitsCoverTheStageAndLandInTheSwizzle) {
  std::vector<int> seen(size_t(kWgBN) * 2, 0);
  std::vector<int> chunk_writes(size_t(kWgBStageBytes / 16), 0);
  for (int t = 0; t < kWg4DequantThreads; ++t)
    for (int u = t; u < kWg4Units; u += kWg4DequantThreads) {
      const Mxfp4Unit w = wgmma_mxfp4_unit(u);
      ASSERT_GE(w.row, 0);
      ASSERT_LT(w.row, kWgBN);
      ASSERT_TRUE(w.group == 0 || w.group == 1);
      seen[size_t(w.row * 2 + w.group)]++;
      // TMA's boxes: rows 0-127 of 32 bytes, then the second box's at 4 KiB.
      const uint32_t box = uint32_t(w.row / kWgBoxRows), box_row = uint32_t(w.row % kWgBoxRows);
      EXPECT_EQ(wgmma_mxfp4_raw_offset(w), box * kWg4RawBoxBytes + box_row * 32 + uint32_t(w.group) * 16);
      for (int c = 0; c < 4; ++c) {
        const int col = w.group * kWg4Group + 8 * c;  // the chunk's first bf16 column
        const uint32_t linear = uint32_t(w.row) * 128 + uint32_t(col) * 2;
        const uint32_t swizzled = linear ^ (((linear >> 7) & 7) << 4);
        ASSERT_EQ(wgmma_mxfp4_chunk_offset(w, c), swizzled) << "row " << w.row << " col " << col;
        chunk_writes[size_t(swizzled / 16)]++;
      }
    }
  for (size_t i = 0; i < seen.size(); ++i)
    ASSERT_EQ(seen[i], 1) << "unit (row " << i / 2 << ", group " << i % 2 << ")";
  for (size_t i = 0; i < chunk_writes.size(); ++i) ASSERT_EQ(chunk_writes[i], 1) << "chunk " << i;
  // Banks: 16-byte stores go out in phases of 8 threads; each phase's chunks must fill the 32 banks once.
  for (int warp = 0; warp < kWg4DequantThreads / 32; ++warp)
    for (int j = 0; warp * 32 + j * kWg4DequantThreads < kWg4Units; ++j)
      for (int c = 0; c < 4; ++c)
        for (int phase = 0; phase < 4; ++phase) {
          std::vector<int> banks(32, 0);
          for (int l = 8 * phase; l < 8 * phase + 8; ++l) {
            const int u = warp * 32 + l + j * kWg4DequantThreads;
            if (u >= kWg4Units) continue;
            const uint32_t off = wgmma_mxfp4_chunk_offset(wgmma_mxfp4_unit(u), c);
            for (uint32_t b = 0; b < 4; ++b) banks[size_t((off / 4 + b) % 32)]++;
          }
          for (int b = 0; b < 32; ++b)
            ASSERT_LE(banks[size_t(b)], 1) << "warp " << warp << " j " << j << " c " << c;
        }
  // Weight rows: gate_up (b_second = I) box 1 holds the up rows of the same columns, down (b_second = 128)
  // the next 128 rows; the scale of k step kt and group g covers k 64 kt + 32 g .. + 31.
  const int I = 3072, n0 = 384;
  EXPECT_EQ(wgmma_tile_weight_row(0, n0, I), n0);
  EXPECT_EQ(wgmma_tile_weight_row(127, n0, I), n0 + 127);
  EXPECT_EQ(wgmma_tile_weight_row(128, n0, I), I + n0);
  EXPECT_EQ(wgmma_tile_weight_row(255, n0, I), I + n0 + 127);
  for (int row = 0; row < kWgBN; ++row) EXPECT_EQ(wgmma_tile_weight_row(row, 512, kWgBoxRows), 512 + row);
  for (int kt = 0; kt < 56; ++kt)
    for (int g = 0; g < 2; ++g) EXPECT_EQ(wgmma_mxfp4_scale_col(kt, g), (kt * kWgBK + g * kWg4Group) / 32);
  // Shared memory: the A stages, then the B tiles (wgmma's swizzled operands: 1024-byte aligned), the raw
  // ring after them.
  EXPECT_EQ(kWg4Stages * kWgAStageBytes % 1024, 0);
  EXPECT_EQ(kWgBStageBytes % 1024, 0);
  EXPECT_EQ(kWg4Units, 2 * kWg4DequantThreads) << "two units a consumer thread";
  EXPECT_EQ(kWg4RawStageBytes, kWgBN * kWgBK / 2);
  EXPECT_LE(kWg4SmemBytes, 227 * 1024) << "H100 / H200 opt-in limit per block";
}

}  // namespace
}  // namespace rill::cuda::moe
