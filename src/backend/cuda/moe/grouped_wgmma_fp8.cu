// Grouped expert GEMMs for FP8 experts on Hopper (options.moe_wgmma_fp8; to be retired: the same GEMMs are
// now the Fp8Weights policy of grouped_wgmma.cu's body, option moe_wgmma_fp8_one_body, which replaces this
// kernel once it has run on a GPU): E4M3 weights with 128 x 128 F32 block scales, activations quantised per
// (slot, 128 columns) to E4M3 with scale amax / 448 (gemm/fp8_native.cu's kernel, the dense native FP8 GEMM's
// rule; x straight from its token rows into expert order, h where the gate_up GEMM wrote it), then
// out[slot, :] = sum over k blocks kb of
// (codes_a . codes_w^T)[kb] * a_scale[slot][kb] * w_scale[e][row / 128][kb].
//
// The bf16 kernel's structure (grouped_wgmma.cu; its instantiation is untouched, this is a second kernel
// beside it, so the verified bf16 code did not change): persistent CTAs walk moe/wgmma_schedule.h's work
// items from the plan's device offsets; 384 threads, warpgroup 0 loads and warpgroups 1-2 compute rows 0-63
// and 64-127.
//  - the loader issues per 128-code k block a TMA box of A (128 slots x 128 codes, 16 KiB) and two of B (64
//    weight rows x 128 codes each) into one of kWg8Stages stages (128-byte swizzle: one row is one scale
//    block).
//  - each consumer: wait `full`, four wgmma m64n128k32 e4m3 into a block accumulator (64 registers), commit,
//    wait for it (the scales apply per block, so no group stays in flight), release the stage, then promote:
//    main += blk * a_scale(row) * w_scale(box). The other consumer's wgmmas overlap this one's promotion.
//    (Promoting block kt - 1 while block kt's wgmmas run, with two block accumulators, measured slower on
//    the H100: the 48B's FP8 8K prompt 141.9 ms against 138.8, docs/PERF.md.)
//  - option moe_wgmma_fp8_pairs (off: correct, but 2.1x slower on the H100 — route + experts at 8K tokens
//    4.60 ms against 2.17, 66 clusters resident — for a cause not yet profiled; written to test whether the
//    tile is bound by L2 traffic): clusters of two CTAs on adjacent column tiles share the A box, each loading one 64-slot half
//    for both through TMA multicast (kPair below).
// gate_up: box 0 the 64 gate rows n0.., box 1 the up rows I + n0.. (their own scale block), so registers i
// and i + 32 hold gate and up of one output column; the epilogue rounds both to bf16, applies the activation
// in fp32 and stores bf16 h (as the bf16 kernel). down: 128 weight rows of one scale block, bf16 y. I and Hx
// are multiples of 128, so every box lies inside its tensor and every k block is whole; rows past an expert's
// slots (the next expert's, or zeros past the tensor) are computed and never stored.
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
#include "core/log.h"

namespace rill::cuda::moe {
namespace {

constexpr int kConsumerWarps = 8;  // arrivals that release a stage: every consumer warp after its wgmma wait
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 65536);
static_assert(kWg8BK == kWgSwizzleBytes && kWg8BK == kWg8ScaleBlock, "a stage row is one scale block");
static_assert(kWg8BN == 2 * kWg8BoxRows && kWgBM == 2 * kWgConsumerRows);
static_assert(kWg8AccRegs == 64, "wgmma_m64n128k32_e4m3 holds 64 accumulators a thread");

struct WgmmaFp8Params {
  const int32_t* expert_offsets;  // [E + 1]: expert e's slots are [offsets[e], offsets[e+1])
  const int32_t* tile_offsets;    // [E + 1]: expert e's first 128-slot tile
  int n_experts, k, n;            // k: reduction width (gate_up: Hx, down: I); n: output columns (I, Hx)
  int n_tiles;                    // column tiles per 128-slot tile: n / wgmma_fp8_tile_cols
  int I;                          // gate_up: where the up rows start (wgmma_fp8_b_row)
  int64_t pairs;
  const float* a_scales;  // [k / 128, pairs]
  const float* w_scales;  // [E, weight rows / 128, k / 128], strides below (elements)
  int64_t ws_expert_stride, ws_ld;
  bf16* out;  // [pairs, n], row stride ldo
  int64_t ldo;
  Act act;  // gate_up only
  float beta, linear_beta;
};

// kPair: launched in clusters of two CTAs that take adjacent column tiles of one 128-slot tile (work items 2i
// and 2i + 1: n_tiles is even, so both lie in one (expert, m-tile)); each CTA's loader fetches one 64-slot half
// of the shared A box (a_map's boxes are 64 rows) and multicasts it into both CTAs' stage, so A crosses L2
// once per pair. A stage is refilled only after the consumers of both CTAs released it (each consumer warp
// arrives on both CTAs' `empty` barrier); every thread stays to the cluster barriers at the start (barrier
// initialisation visible to the peer) and the end (no CTA leaves while its peer may still write into it).
template <bool kGateUp, bool kPair>
__global__ void __launch_bounds__(kWgThreads, 1)
    moe_grouped_wgmma_fp8_kernel(const __grid_constant__ CUtensorMap a_map,
                                 const __grid_constant__ CUtensorMap b_map, const WgmmaFp8Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;  // kWg8SmemBytes keeps 1024 bytes for this
  const uint32_t a0 = base, b0 = base + kWg8Stages * kWg8AStageBytes;
  const uint32_t full0 = base + kWg8Stages * kWg8StageBytes, empty0 = full0 + kWg8Stages * 8;
  int32_t* s_slots = reinterpret_cast<int32_t*>(smem_raw + (full0 + kWg8BarrierBytes - smem_addr(smem_raw)));
  int32_t* s_tiles = s_slots + kWgMaxExperts + 1;
  const int warpgroup = int(threadIdx.x) / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kWg8Stages; ++s) {
      mbar_init(full0 + 8 * s, 1);
      mbar_init(empty0 + 8 * s, kConsumerWarps * (kPair ? 2 : 1));
    }
    mbar_fence_init();
    tma_prefetch_map(&a_map);
    tma_prefetch_map(&b_map);
  }
  pdl_prologue();  // the offsets, codes and scales come from the kernels before
  for (int e = int(threadIdx.x); e <= p.n_experts; e += kWgThreads) {
    s_slots[e] = p.expert_offsets[e];
    s_tiles[e] = p.tile_offsets[e];
  }
  if constexpr (kPair)
    cluster_sync();  // also the CTA barrier for the offsets
  else
    __syncthreads();
  constexpr int kCols = wgmma_fp8_tile_cols(kGateUp);
  const int n_items = s_tiles[p.n_experts] * p.n_tiles;
  const int k_tiles = p.k / kWg8BK;
  // This CTA's work items: units strided over the grid's CTAs, or over its clusters (kPair: a unit is the
  // pair's two items, wgmma_pair_item).
  const int rank = kPair ? int(cluster_cta_rank()) : 0;
  const int first_unit = kPair ? int(cluster_index()) : int(blockIdx.x);
  const int unit_stride = kPair ? int(cluster_count()) : int(gridDim.x);
  const int n_units = kPair ? n_items / 2 : n_items;

  if (warpgroup == 0) {
    setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x != 0) {
      if constexpr (kPair) cluster_sync();
      return;
    }
    int stage = 0;
    uint32_t phase = 0;
    for (int unit = first_unit; unit < n_units; unit += unit_stride) {
      const int item = kPair ? wgmma_pair_item(unit, rank) : unit;
      const WgmmaWork w = wgmma_work(item, p.n_tiles, kCols, s_tiles, p.n_experts);
      const int a_row = s_slots[w.e] + w.m0;
      const int a_half_row = wgmma_pair_a_row(a_row, rank, int(p.pairs));  // kPair: this CTA's half of A
      const int b_row0 = wgmma_fp8_b_row(kGateUp, w.n0, p.I, 0),
                b_row1 = wgmma_fp8_b_row(kGateUp, w.n0, p.I, 1);
      for (int kt = 0; kt < k_tiles; ++kt) {
        mbar_wait(empty0 + 8 * stage, phase ^ 1);
        const uint32_t full = full0 + 8 * stage;
        mbar_arrive_expect_tx(full, kWg8StageBytes);
        const int k0 = kt * kWg8BK;
        const uint32_t b = b0 + stage * kWg8BStageBytes;
        if constexpr (kPair)
          tma_load_2d_multicast(a0 + stage * kWg8AStageBytes + rank * kWgConsumerRows * kWg8BK, &a_map, full, k0,
                                a_half_row, 0x3);
        else
          tma_load_2d(a0 + stage * kWg8AStageBytes, &a_map, full, k0, a_row);
        tma_load_3d(b, &b_map, full, k0, b_row0, w.e);
        tma_load_3d(b + kWg8BStageBytes / 2, &b_map, full, k0, b_row1, w.e);
        if (++stage == kWg8Stages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    if constexpr (kPair) cluster_sync();
    return;
  }

  setmaxnreg_inc<kConsumerRegs>();
  const int consumer = warpgroup - 1;
  const int warp = (int(threadIdx.x) >> 5) & 3, lane = int(threadIdx.x) & 31;
  const int row0 =
      consumer * kWgConsumerRows + 16 * warp + (lane >> 2);  // this thread's rows: row0, row0 + 8
  int stage = 0;
  uint32_t phase = 0;
  float acc[kWg8AccRegs], blk[kWg8AccRegs];
  for (int unit = first_unit; unit < n_units; unit += unit_stride) {
    const int item = kPair ? wgmma_pair_item(unit, rank) : unit;
    const WgmmaWork w = wgmma_work(item, p.n_tiles, kCols, s_tiles, p.n_experts);
    const int seg = s_slots[w.e];
    const int m_valid = min(kWgBM, s_slots[w.e + 1] - seg - w.m0);
    const bool valid0 = row0 < m_valid, valid1 = row0 + 8 < m_valid;  // slots of this expert (< pairs)
    const float* a_s0 = p.a_scales + (seg + w.m0 + row0);
    const float* ws = p.w_scales + int64_t(w.e) * p.ws_expert_stride;
    const float* ws0 = ws + int64_t(wgmma_fp8_w_scale_row(kGateUp, w.n0, p.I, 0)) * p.ws_ld;
    const float* ws1 = ws + int64_t(wgmma_fp8_w_scale_row(kGateUp, w.n0, p.I, 1)) * p.ws_ld;
#pragma unroll
    for (int i = 0; i < kWg8AccRegs; ++i) acc[i] = 0.0f;
    for (int kt = 0; kt < k_tiles; ++kt) {
      // This block's scales, loaded while the stage may still be arriving (L2 hits after the first tile).
      const int64_t at = wgmma_fp8_a_scale_index(0, kt, p.pairs);
      const float sa0 = valid0 ? a_s0[at] : 0.0f, sa1 = valid1 ? a_s0[at + 8] : 0.0f;
      const float sw0 = ws0[kt], sw1 = ws1[kt];
      mbar_wait(full0 + 8 * stage, phase);
      const uint32_t a = a0 + stage * kWg8AStageBytes + consumer * kWgConsumerRows * kWgSwizzleBytes;
      const uint32_t b = b0 + stage * kWg8BStageBytes;
#pragma unroll
      for (int i = 0; i < kWg8AccRegs; ++i) wgmma_fence_operand(blk[i]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kWg8BK / 32; ++kk)  // k32 steps: 32 bytes along the swizzled 128-byte rows
        wgmma_m64n128k32_e4m3(blk, wgmma_desc_sw128(a + kk * 32), wgmma_desc_sw128(b + kk * 32),
                              kk != 0 ? 1u : 0u);
      wgmma_commit();
      wgmma_wait<0>();  // the block's product is complete (its shared-memory reads too)
#pragma unroll
      for (int i = 0; i < kWg8AccRegs; ++i) wgmma_fence_operand(blk[i]);
      if (lane == 0) {  // one arrival per warp (on both CTAs' barrier when they share the stage's A)
        if constexpr (kPair) {
          mbar_arrive_cluster(empty0 + 8 * stage, 0);
          mbar_arrive_cluster(empty0 + 8 * stage, 1);
        } else {
          mbar_arrive(empty0 + 8 * stage);
        }
      }
      // Promotion: register i's row is row0 (+ 8 for i % 4 >= 2), its weight rows those of box
      // wgmma_fp8_acc_box(i) (both compile-time per unrolled i).
      const float s00 = sa0 * sw0, s01 = sa0 * sw1, s10 = sa1 * sw0, s11 = sa1 * sw1;
#pragma unroll
      for (int i = 0; i < kWg8AccRegs; ++i) {
        const bool hi_row = (i & 2) != 0, box1 = wgmma_fp8_acc_box(i) != 0;
        acc[i] = fmaf(blk[i], hi_row ? (box1 ? s11 : s10) : (box1 ? s01 : s00), acc[i]);
      }
      if (++stage == kWg8Stages) {
        stage = 0;
        phase ^= 1;
      }
    }
    // Epilogue: accumulator pairs (i, i + 1) share a row and hold adjacent columns (wgmma_acc_pos).
    bf16* out = p.out + int64_t(seg + w.m0) * p.ldo + w.n0;
#pragma unroll
    for (int i = 0; i < (kGateUp ? kWg8AccRegs / 2 : kWg8AccRegs); i += 2) {
      const WgmmaAccPos q = wgmma_acc_pos(warp, lane, i);
      const int row = consumer * kWgConsumerRows + q.row;
      if (row >= m_valid) continue;  // n is a multiple of the tile's columns
      float v0 = acc[i], v1 = acc[i + 1];
      if constexpr (kGateUp) {  // up is n8 block j + 8: 32 registers further
        v0 = expert_act(p.act, round_bf16(v0), round_bf16(acc[i + kWg8AccRegs / 2]), p.beta, p.linear_beta);
        v1 = expert_act(p.act, round_bf16(v1), round_bf16(acc[i + 1 + kWg8AccRegs / 2]), p.beta,
                        p.linear_beta);
      }
      *reinterpret_cast<__nv_bfloat162*>(out + int64_t(row) * p.ldo + q.col) = __floats2bfloat162_rn(v0, v1);
    }
  }
  if constexpr (kPair) cluster_sync();
#else
  __trap();  // the host launches this only where the sm_90a build runs (wgmma_fp8_experts_supported)
#endif
}

// TMA's view of a step's FP8 tensors (bytes): A boxes of 128 slots x 128 codes from the quantised
// activations, B boxes of 64 weight rows x 128 codes of one expert (rank 3: k, row, expert).
// With `pair_halves` the A boxes are 64 slots (one CTA's half of a pair's shared box).
struct StepMaps {
  TensorMapBf16 gu_a, gu_b, dn_a, dn_b;
};

StepMaps step_maps(const WgmmaExpertsArgs& c, bool pair_halves = false) {
  const backend::ExpertWeights& ex = *c.args->experts;
  auto activations = [&](int64_t k) {
    TensorMapBf16 t;
    t.elem = TensorMapElem::U8;
    t.base = c.codes;
    t.rank = 2;
    t.dims[0] = uint64_t(k);
    t.dims[1] = uint64_t(c.pairs);
    t.strides[0] = uint64_t(k);
    t.box[0] = kWg8BK;
    t.box[1] = pair_halves ? kWgConsumerRows : kWgBoxRows;
    return t;
  };
  auto weights = [&](const TensorView& w) {
    TensorMapBf16 t;
    t.elem = TensorMapElem::U8;
    t.base = w.data;
    t.rank = 3;
    t.dims[0] = uint64_t(w.size(2));
    t.dims[1] = uint64_t(w.size(1));
    t.dims[2] = uint64_t(w.size(0));
    t.strides[0] = uint64_t(w.stride(1));
    t.strides[1] = uint64_t(w.stride(0));
    t.box[0] = kWg8BK;
    t.box[1] = kWg8BoxRows;
    t.box[2] = 1;
    return t;
  };
  return {activations(c.Hx), weights(ex.gate_up), activations(c.I), weights(ex.down)};
}

// F32 [E, rows / 128, k / 128] scales with contiguous rows.
bool scales_ok(const TensorView& s, int64_t E, int64_t rows, int64_t k) {
  return s.dtype == DType::F32 && s.rank() == 3 && s.size(0) == E && s.size(1) == rows / kWg8ScaleBlock &&
         s.size(2) == k / kWg8ScaleBlock && (s.size(2) <= 1 || s.stride(2) == 1);
}

// opt_in_smem: once per device and kernel ([kPair])
std::atomic<uint64_t> g_smem_gate_up[2], g_smem_down[2];

// How many clusters of two of the pair kernel can be resident at once on this device (its shared memory
// allows one CTA per SM, and a cluster's two CTAs must share a GPC): the pair grid is at most twice this, so
// every CTA of the persistent grid runs from the start. 0: clusters of two cannot run here.
// The pair kernels' shared memory is opted into first (the occupancy query counts it).
Result<int> max_pair_clusters_twin(const CudaContext& cx) {
  RILL_TRY(opt_in_smem("moe_grouped_wgmma_fp8", reinterpret_cast<const void*>(moe_grouped_wgmma_fp8_kernel<true, true>),
                       kWg8SmemBytes, cx, &g_smem_gate_up[1]));
  RILL_TRY(opt_in_smem("moe_grouped_wgmma_fp8", reinterpret_cast<const void*>(moe_grouped_wgmma_fp8_kernel<false, true>),
                       kWg8SmemBytes, cx, &g_smem_down[1]));
  static std::atomic<int> cached[64];  // per device ordinal: 0 unknown, else count + 1
  std::atomic<int>& slot = cached[cx.device & 63];
  if (const int v = slot.load(std::memory_order_relaxed); v > 0) return v - 1;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 2;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(2 * std::max(cx.sm_count / 2, 1)));
  cfg.blockDim = dim3(kWgThreads);
  cfg.dynamicSmemBytes = kWg8SmemBytes;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, reinterpret_cast<const void*>(moe_grouped_wgmma_fp8_kernel<true, true>), &cfg) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  slot.store(n + 1, std::memory_order_relaxed);
  RILL_LOG_INFO("moe experts (wgmma fp8): {} clusters of two CTAs resident at once on device {}", n, cx.device);
  return n;
}

}  // namespace

Result<int> wgmma_fp8_pair_clusters(const CudaContext& cx) {
  return max_pair_clusters_twin(cx);
}

bool wgmma_fp8_experts_supported(const WgmmaExpertsArgs& c, const CudaContext& cx) {
  if (!wgmma_device_supported(cx) || cx.max_smem_per_block < size_t(kWg8SmemBytes)) return false;
  const backend::ExpertWeights& ex = *c.args->experts;
  if (ex.format != backend::WeightFormat::Fp8 || ex.gate_up.dtype != DType::F8E4M3 ||
      ex.down.dtype != DType::F8E4M3 || ex.block.rows != kWg8ScaleBlock || ex.block.cols != kWg8ScaleBlock)
    return false;
  if (c.I % kWg8ScaleBlock != 0 || c.Hx % kWg8ScaleBlock != 0 || c.pairs < kWgBM || c.pairs > INT32_MAX ||
      c.E < 1 || c.E > kWgMaxExperts || !c.codes || !c.a_scales || c.args->x.stride(0) % 8 != 0)
    return false;  // (x's rows 16-byte aligned: the quantisation's loads)
  if (ex.gate_up.stride(2) != 1 || ex.down.stride(2) != 1 ||
      !scales_ok(ex.gate_up_scales, c.E, 2 * c.I, c.Hx) || !scales_ok(ex.down_scales, c.E, c.Hx, c.I))
    return false;
  const StepMaps m = step_maps(c);
  for (const TensorMapBf16* t : {&m.gu_a, &m.gu_b, &m.dn_a, &m.dn_b})
    if (*tensor_map_refusal(*t)) return false;
  return true;
}

Status run_expert_gemms_wgmma_fp8(const WgmmaExpertsArgs& c, const CudaContext& cx) {
  const backend::MoeExpertsArgs& a = *c.args;
  const backend::ExpertWeights& ex = *a.experts;
  const StepMaps m = step_maps(c);
  RILL_ASSIGN_OR_RETURN(const CUtensorMap gu_a,
                        make_tensor_map(m.gu_a, "moe_experts (wgmma fp8): quantised x"));
  RILL_ASSIGN_OR_RETURN(const CUtensorMap gu_b,
                        make_tensor_map(m.gu_b, "moe_experts (wgmma fp8): gate_up weights"));
  RILL_ASSIGN_OR_RETURN(const CUtensorMap dn_a,
                        make_tensor_map(m.dn_a, "moe_experts (wgmma fp8): quantised activations"));
  RILL_ASSIGN_OR_RETURN(const CUtensorMap dn_b,
                        make_tensor_map(m.dn_b, "moe_experts (wgmma fp8): down weights"));
  // Clusters of two CTAs sharing A (option moe_wgmma_fp8_pairs) for a GEMM whose column tiles pair up.
  int pair_clusters = 0;
  if (cx.options.moe_wgmma_fp8_pairs) {
    RILL_ASSIGN_OR_RETURN(pair_clusters, max_pair_clusters_twin(cx));
  }
  const int gu_tiles = c.I / wgmma_fp8_tile_cols(true), dn_tiles = c.Hx / wgmma_fp8_tile_cols(false);
  const bool gu_pair = pair_clusters > 0 && gu_tiles % 2 == 0, dn_pair = pair_clusters > 0 && dn_tiles % 2 == 0;
  CUtensorMap gu_a_half = gu_a, dn_a_half = dn_a;  // 64-slot A boxes for the pair kernels
  if (gu_pair || dn_pair) {
    const StepMaps halves = step_maps(c, true);
    RILL_ASSIGN_OR_RETURN(gu_a_half, make_tensor_map(halves.gu_a, "moe_experts (wgmma fp8): quantised x, halves"));
    RILL_ASSIGN_OR_RETURN(dn_a_half,
                          make_tensor_map(halves.dn_a, "moe_experts (wgmma fp8): quantised activations, halves"));
  }
  auto* gate_up = gu_pair ? moe_grouped_wgmma_fp8_kernel<true, true> : moe_grouped_wgmma_fp8_kernel<true, false>;
  auto* down = dn_pair ? moe_grouped_wgmma_fp8_kernel<false, true> : moe_grouped_wgmma_fp8_kernel<false, false>;
  RILL_TRY(opt_in_smem("moe_grouped_wgmma_fp8", reinterpret_cast<const void*>(gate_up), kWg8SmemBytes, cx,
                       &g_smem_gate_up[gu_pair]));
  RILL_TRY(opt_in_smem("moe_grouped_wgmma_fp8", reinterpret_cast<const void*>(down), kWg8SmemBytes, cx,
                       &g_smem_down[dn_pair]));
  // x quantised straight into expert order (slot s from token slot_token[s]); no bf16 copy of the gathered
  // rows (H100, 8K tokens: the gather's 0.18 ms and the quantisation's 0.20 ms a layer became 0.24 ms).
  RILL_TRY(launch_fp8_quantize_gathered_rows(a.x.data, a.x.stride(0), c.slot_token, c.expert_offsets + c.E,
                                             c.pairs, c.Hx, c.codes, c.a_scales, cx.stream));

  WgmmaFp8Params p{};
  p.expert_offsets = c.expert_offsets;
  p.tile_offsets = c.tile_offsets;
  p.n_experts = c.E;
  p.I = c.I;
  p.pairs = c.pairs;
  p.a_scales = c.a_scales;
  p.act = a.activation == backend::Activation::Silu ? Act::Silu : Act::Situ;
  p.beta = a.beta;
  p.linear_beta = a.linear_beta;
  // Persistent grids: one CTA per SM (the shared memory allows one), fewer when the step has fewer items; pair
  // grids: the resident clusters of two, fewer when the step has fewer item pairs.
  auto shape = [&](int n_tiles, bool pair) {
    const int64_t items = int64_t(c.max_tiles) * n_tiles;
    if (pair)
      return LaunchShape{dim3(unsigned(2 * std::max<int64_t>(1, std::min<int64_t>(pair_clusters, items / 2)))),
                         dim3(kWgThreads), size_t(kWg8SmemBytes), 2};
    return LaunchShape{dim3(unsigned(std::max<int64_t>(1, std::min<int64_t>(cx.sm_count, items)))),
                       dim3(kWgThreads), size_t(kWg8SmemBytes)};
  };

  p.k = c.Hx;
  p.n = c.I;
  p.n_tiles = c.I / wgmma_fp8_tile_cols(true);
  p.w_scales = static_cast<const float*>(ex.gate_up_scales.data);
  p.ws_expert_stride = ex.gate_up_scales.stride(0);
  p.ws_ld = ex.gate_up_scales.stride(1);
  p.out = c.h;
  p.ldo = c.I;
  RILL_TRY(launch("moe_grouped_wgmma_fp8_gate_up", shape(p.n_tiles, gu_pair), cx.stream, gate_up,
                  gu_pair ? gu_a_half : gu_a, gu_b, p));
  RILL_TRY(launch_fp8_quantize_rows(c.h, c.I, c.pairs, c.I, c.codes, c.a_scales, cx.stream));

  p.k = c.I;
  p.n = c.Hx;
  p.n_tiles = c.Hx / wgmma_fp8_tile_cols(false);
  p.w_scales = static_cast<const float*>(ex.down_scales.data);
  p.ws_expert_stride = ex.down_scales.stride(0);
  p.ws_ld = ex.down_scales.stride(1);
  p.out = c.xy;
  p.ldo = c.Hx;
  return launch("moe_grouped_wgmma_fp8_down", shape(p.n_tiles, dn_pair), cx.stream, down,
                dn_pair ? dn_a_half : dn_a, dn_b, p);
}

}  // namespace rill::cuda::moe
