// Grouped expert GEMMs for bf16 experts on Hopper: out[slot, :] = a[slot, :] . W_e^T for the slots of each
// expert e, with A the activations in expert order (x gathered for gate_up, h for down) and W the stacked
// experts.
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
#include "backend/cuda/moe/device.cuh"
#include "backend/cuda/moe/grouped_cublas_path.h"
#include "backend/cuda/moe/grouped_wgmma.h"
#include "backend/cuda/moe/wgmma_schedule.h"

namespace rill::cuda::moe {
namespace {

constexpr int kConsumerWarps = 8;  // arrivals that release a stage: every consumer warp after its wgmma wait
constexpr int kProducerRegs = 40, kConsumerRegs = 232;  // setmaxnreg: multiples of 8 within the 64K registers
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 65536 && kProducerRegs % 8 == 0 &&
              kConsumerRegs % 8 == 0);
static_assert(kWgThreads == 3 * 128 && kConsumerWarps == 2 * 4, "one producer and two consumer warpgroups");
static_assert(kWgBM == 2 * kWgConsumerRows && kWgBoxRows == kWgBM && kWgBN == 2 * kWgBoxRows);
static_assert(kWgBK * 2 == kWgSwizzleBytes, "a stage row is one 128-byte swizzle row");
static_assert(kWgAccRegs == 128, "wgmma_m64n256k16_bf16 holds 128 accumulators a thread");
static_assert(kWgMaxExperts == kMaxExperts, "the offsets' room in shared memory");

struct WgmmaGemmParams {
  const int32_t* expert_offsets;  // [E + 1]: expert e's slots are [offsets[e], offsets[e+1])
  const int32_t* tile_offsets;    // [E + 1]: expert e's first 128-slot tile
  int n_experts, k, n;            // k: reduction width (gate_up: Hx, down: I); n: output columns (I, Hx)
  int n_tiles;                    // column tiles per 128-slot tile: ceil(n / wgmma_tile_cols)
  int b_second;                   // B's second box starts this many weight rows after the first (gate_up: I)
  int b_rows;                     // weight rows per expert (gate_up: 2I, down: Hx)
  bf16* out;                      // [P, n], row stride ldo
  int64_t ldo;
  Act act;  // gate_up only
  float beta, linear_beta;
};

template <bool kGateUp>
__global__ void __launch_bounds__(kWgThreads, 1)
    moe_grouped_wgmma_kernel(const __grid_constant__ CUtensorMap a_map,
                             const __grid_constant__ CUtensorMap b_map, const WgmmaGemmParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;  // kWgSmemBytes keeps 1024 bytes for this
  const uint32_t a0 = base, b0 = base + kWgStages * kWgAStageBytes;
  const uint32_t full0 = base + kWgStages * kWgStageBytes, empty0 = full0 + kWgStages * 8;
  // The plan's offsets, [E + 1] each, after the barriers (generic pointers into the same aligned window).
  int32_t* s_slots = reinterpret_cast<int32_t*>(smem_raw + (full0 + kWgBarrierBytes - smem_addr(smem_raw)));
  int32_t* s_tiles = s_slots + kWgMaxExperts + 1;
  const int warpgroup = int(threadIdx.x) / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kWgStages; ++s) {
      mbar_init(full0 + 8 * s, 1);  // the producer's arrive_expect_tx; the bytes complete the phase
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
  constexpr int kCols = wgmma_tile_cols(kGateUp);
  const int n_items = s_tiles[p.n_experts] * p.n_tiles;
  const int k_tiles = (p.k + kWgBK - 1) / kWgBK;

  if (warpgroup == 0) {
    setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x != 0) return;
    int stage = 0;
    uint32_t phase = 0;
    for (int item = int(blockIdx.x); item < n_items; item += int(gridDim.x)) {
      const WgmmaWork w = wgmma_work(item, p.n_tiles, kCols, s_tiles, p.n_experts);
      const int a_row = s_slots[w.e] + w.m0;
      // down's last column tile may start its second box past the expert's rows: not loaded (no box is read
      // wholly out of bounds), its stale half of the stage feeds only columns past n, never stored.
      const bool second = w.n0 + p.b_second < p.b_rows;
      const uint32_t bytes = second ? kWgStageBytes : kWgStageBytes - kWgBStageBytes / 2;
      for (int kt = 0; kt < k_tiles; ++kt) {
        mbar_wait(empty0 + 8 * stage, phase ^ 1);  // the consumers are done with this stage's previous tile
        const uint32_t full = full0 + 8 * stage;
        mbar_arrive_expect_tx(full, bytes);
        const int k0 = kt * kWgBK;
        const uint32_t b = b0 + stage * kWgBStageBytes;
        tma_load_2d(a0 + stage * kWgAStageBytes, &a_map, full, k0, a_row);
        tma_load_3d(b, &b_map, full, k0, w.n0, w.e);
        if (second) tma_load_3d(b + kWgBStageBytes / 2, &b_map, full, k0, w.n0 + p.b_second, w.e);
        if (++stage == kWgStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    return;
  }

  setmaxnreg_inc<kConsumerRegs>();
  const int consumer = warpgroup - 1;  // rows 64 * consumer .. of the tile
  const int warp = (int(threadIdx.x) >> 5) & 3, lane = int(threadIdx.x) & 31;
  int stage = 0;
  uint32_t phase = 0;
  float acc[kWgAccRegs];
  for (int item = int(blockIdx.x); item < n_items; item += int(gridDim.x)) {
    const WgmmaWork w = wgmma_work(item, p.n_tiles, kCols, s_tiles, p.n_experts);
    const int seg = s_slots[w.e];
    const int m_valid = min(kWgBM, s_slots[w.e + 1] - seg - w.m0);
#pragma unroll
    for (int i = 0; i < kWgAccRegs; ++i) acc[i] = 0.0f;
    int in_flight = -1;  // the stage whose wgmmas may still be reading it
    for (int kt = 0; kt < k_tiles; ++kt) {
      mbar_wait(full0 + 8 * stage, phase);
      const uint32_t a = a0 + stage * kWgAStageBytes + consumer * kWgConsumerRows * kWgSwizzleBytes;
      const uint32_t b = b0 + stage * kWgBStageBytes;
#pragma unroll
      for (int i = 0; i < kWgAccRegs; ++i) wgmma_fence_operand(acc[i]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kWgBK / 16; ++kk)  // k16 steps: 32 bytes along the swizzled 128-byte rows
        wgmma_m64n256k16_bf16(acc, wgmma_desc_sw128(a + kk * 32), wgmma_desc_sw128(b + kk * 32),
                              (kt | kk) != 0 ? 1u : 0u);
      wgmma_commit();
      // Lag-one release: this step's group may still run (it chains on the same accumulators, which wgmma
      // orders by itself); the previous step's group has completed, its shared-memory reads included, so
      // that stage goes back to the producer.
      wgmma_wait<1>();
#pragma unroll
      for (int i = 0; i < kWgAccRegs; ++i) wgmma_fence_operand(acc[i]);
      if (in_flight >= 0 && lane == 0) mbar_arrive(empty0 + 8 * in_flight);
      in_flight = stage;
      if (++stage == kWgStages) {
        stage = 0;
        phase ^= 1;
      }
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < kWgAccRegs; ++i) wgmma_fence_operand(acc[i]);
    if (in_flight >= 0 && lane == 0) mbar_arrive(empty0 + 8 * in_flight);  // one arrival per warp
    // Epilogue: accumulator pairs (i, i + 1) share a row and hold adjacent columns (wgmma_acc_pos).
    bf16* out = p.out + int64_t(seg + w.m0) * p.ldo + w.n0;
#pragma unroll
    for (int i = 0; i < (kGateUp ? kWgAccRegs / 2 : kWgAccRegs); i += 2) {
      const WgmmaAccPos q = wgmma_acc_pos(warp, lane, i);
      const int row = consumer * kWgConsumerRows + q.row;
      if (row >= m_valid || w.n0 + q.col >= p.n) continue;  // n is even: column q.col + 1 is in range too
      float v0 = acc[i], v1 = acc[i + 1];
      if constexpr (kGateUp) {  // up is n8 block j + 16: 64 registers further
        v0 = expert_act(p.act, round_bf16(v0), round_bf16(acc[i + kWgAccRegs / 2]), p.beta, p.linear_beta);
        v1 =
            expert_act(p.act, round_bf16(v1), round_bf16(acc[i + 1 + kWgAccRegs / 2]), p.beta, p.linear_beta);
      }
      *reinterpret_cast<__nv_bfloat162*>(out + int64_t(row) * p.ldo + q.col) = __floats2bfloat162_rn(v0, v1);
    }
  }
#else
  __trap();  // the host launches this only where the sm_90a build runs (wgmma_experts_supported)
#endif
}

// The four tensors of a step as TMA sees them: A boxes of 128 slots x 64 k, B boxes of 128 weight rows x 64 k
// of one expert (rank 3: k, row, expert, so any expert stride works and rows past an expert's end are zeros).
struct StepMaps {
  TensorMapBf16 gu_a, gu_b, dn_a, dn_b;
};

StepMaps step_maps(const WgmmaExpertsArgs& c) {
  const backend::ExpertWeights& ex = *c.args->experts;
  auto activations = [&](const bf16* base, int64_t k) {
    TensorMapBf16 t;
    t.base = base;
    t.rank = 2;
    t.dims[0] = uint64_t(k);
    t.dims[1] = uint64_t(c.pairs);
    t.strides[0] = uint64_t(k) * 2;
    t.box[0] = kWgBK;
    t.box[1] = kWgBoxRows;
    return t;
  };
  auto weights = [&](const TensorView& w) {
    TensorMapBf16 t;
    t.base = w.data;
    t.rank = 3;
    t.dims[0] = uint64_t(w.size(2));
    t.dims[1] = uint64_t(w.size(1));
    t.dims[2] = uint64_t(w.size(0));
    t.strides[0] = uint64_t(w.stride(1)) * 2;
    t.strides[1] = uint64_t(w.stride(0)) * 2;
    t.box[0] = kWgBK;
    t.box[1] = kWgBoxRows;
    t.box[2] = 1;
    return t;
  };
  return {activations(c.xy, c.Hx), weights(ex.gate_up), activations(c.h, c.I), weights(ex.down)};
}

std::atomic<uint64_t> g_smem_gate_up{0}, g_smem_down{0};  // opt_in_smem: once per device

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
  if (!wgmma_device_supported(cx)) return false;
  // Every dimension at least its box (the TMA boxes never exceed the tensor they read).
  if (c.I < kWgBK || c.Hx < kWgBoxRows || c.pairs < kWgBM || c.pairs > INT32_MAX || c.E < 1 ||
      c.E > kWgMaxExperts)
    return false;
  const StepMaps m = step_maps(c);
  for (const TensorMapBf16* t : {&m.gu_a, &m.gu_b, &m.dn_a, &m.dn_b})
    if (*tensor_map_refusal(*t)) return false;
  return true;
}

Status run_expert_gemms_wgmma(const WgmmaExpertsArgs& c, const CudaContext& cx) {
  const backend::MoeExpertsArgs& a = *c.args;
  const StepMaps m = step_maps(c);
  RILL_ASSIGN_OR_RETURN(const CUtensorMap gu_a, make_tensor_map(m.gu_a, "moe_experts (wgmma): gathered x"));
  RILL_ASSIGN_OR_RETURN(const CUtensorMap gu_b,
                        make_tensor_map(m.gu_b, "moe_experts (wgmma): gate_up weights"));
  RILL_ASSIGN_OR_RETURN(const CUtensorMap dn_a, make_tensor_map(m.dn_a, "moe_experts (wgmma): activations"));
  RILL_ASSIGN_OR_RETURN(const CUtensorMap dn_b, make_tensor_map(m.dn_b, "moe_experts (wgmma): down weights"));
  auto* gate_up = moe_grouped_wgmma_kernel<true>;
  auto* down = moe_grouped_wgmma_kernel<false>;
  RILL_TRY(opt_in_smem("moe_grouped_wgmma", reinterpret_cast<const void*>(gate_up), kWgSmemBytes, cx,
                       &g_smem_gate_up));
  RILL_TRY(
      opt_in_smem("moe_grouped_wgmma", reinterpret_cast<const void*>(down), kWgSmemBytes, cx, &g_smem_down));
  RILL_TRY(launch_gather_rows(a, c.slot_token, c.expert_offsets, c.E, c.Hx, c.pairs, c.xy, cx.stream));

  WgmmaGemmParams p{};
  p.expert_offsets = c.expert_offsets;
  p.tile_offsets = c.tile_offsets;
  p.n_experts = c.E;
  p.act = a.activation == backend::Activation::Silu ? Act::Silu : Act::Situ;
  p.beta = a.beta;
  p.linear_beta = a.linear_beta;
  // Persistent grids: one CTA per SM (the shared memory allows one), fewer when the step has fewer items.
  auto grid = [&](int n_tiles) {
    return dim3(
        unsigned(std::max<int64_t>(1, std::min<int64_t>(cx.sm_count, int64_t(c.max_tiles) * n_tiles))));
  };

  p.k = c.Hx;
  p.n = c.I;
  p.n_tiles = (c.I + wgmma_tile_cols(true) - 1) / wgmma_tile_cols(true);
  p.b_second = c.I;  // the up rows of the same columns
  p.b_rows = 2 * c.I;
  p.out = c.h;
  p.ldo = c.I;
  RILL_TRY(launch("moe_grouped_wgmma_gate_up", {grid(p.n_tiles), dim3(kWgThreads), size_t(kWgSmemBytes)},
                  cx.stream, gate_up, gu_a, gu_b, p));

  p.k = c.I;
  p.n = c.Hx;
  p.n_tiles = (c.Hx + wgmma_tile_cols(false) - 1) / wgmma_tile_cols(false);
  p.b_second = kWgBoxRows;  // the next 128 rows
  p.b_rows = c.Hx;
  p.out = c.xy;
  p.ldo = c.Hx;
  return launch("moe_grouped_wgmma_down", {grid(p.n_tiles), dim3(kWgThreads), size_t(kWgSmemBytes)},
                cx.stream, down, dn_a, dn_b, p);
}

}  // namespace rill::cuda::moe
