// The grouped (prefill) bf16, MXFP4 and FP8 expert GEMMs on Hopper's TMA and wgmma (grouped_wgmma.cu),
// between the plan kernel and the combine of experts.cu: gather (FP8: quantise) x into expert order, gate_up
// with the activation in its epilogue, down. No host readback (the work list comes from the plan's device
// offsets), so it runs inside graph captures too. Same rounding points as the other grouped paths
// (moe/README.md, "Invariants").
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "backend/cuda/context.h"
#include "backend/cuda/moe/params.h"

namespace rill::cuda::moe {

struct WgmmaExpertsArgs {
  const backend::MoeExpertsArgs* args;
  int E, I, Hx;
  int64_t pairs;
  int max_tiles;                  // an upper bound of the 128-slot tiles over all experts (from shapes)
  const int32_t* expert_offsets;  // [E + 1], device
  const int32_t* tile_offsets;    // [E + 1], device: each expert's first 128-slot tile (wgmma_tiles)
  const int32_t* slot_token;      // [pairs], device: the token feeding each slot
  bf16* xy;                       // [pairs, Hx]: x in expert order, then each slot's expert output y
  bf16* h;                        // [pairs, I]: the activations
  // FP8 experts only (Fp8Weights, Fp8ChannelWeights): the quantised A of either GEMM (x gathered, then h).
  uint8_t* codes = nullptr;   // E4M3 [pairs, max(Hx, I)]
  float* a_scales = nullptr;  // [max(Hx, I) / 128, pairs] (per-channel weights use the first [pairs])
};

// Whether this build and device run the path (sm_90 with the sm_90a kernels compiled in) and TMA takes the
// step's tensors (16-byte aligned bases and row strides, every dimension at least its box: I >= 64, Hx >=
// 128, pairs >= 128). Pointers are read for alignment only; nothing is launched.
bool wgmma_experts_supported(const WgmmaExpertsArgs& c, const CudaContext& cx);
// Whether the device and build could run it at all (the backend refuses moe_wgmma=1 elsewhere).
bool wgmma_device_supported(const CudaContext& cx);

Status run_expert_gemms_wgmma(const WgmmaExpertsArgs& c, const CudaContext& cx);

// The MXFP4 policy of the same kernel body (options.moe_wgmma_mxfp4; K3's experts, W4A16): U8 packed codes
// and E8M0 scales with contiguous rows, Hx and I multiples of 64, pairs >= 128; gather, gate_up, down, the
// codes dequantised to bf16 in shared memory by the consumer warpgroups (grouped_wgmma.cu).
bool wgmma_mxfp4_experts_supported(const WgmmaExpertsArgs& c, const CudaContext& cx);
Status run_expert_gemms_wgmma_mxfp4(const WgmmaExpertsArgs& c, const CudaContext& cx);

// The FP8 policies of the same body (options.moe_wgmma_fp8): E4M3 experts with 128 x 128 F32 block scales
// (activations quantised per slot and 128 columns) or one F32 scale per weight row, contiguous (activations
// quantised per slot), I and Hx multiples of 128, pairs >= 128; quantise x into expert order, gate_up,
// quantise h, down.
bool wgmma_fp8_experts_supported(const WgmmaExpertsArgs& c, const CudaContext& cx);
Status run_expert_gemms_wgmma_fp8(const WgmmaExpertsArgs& c, const CudaContext& cx);

}  // namespace rill::cuda::moe
