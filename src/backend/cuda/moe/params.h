// MoE kernels: tile sizes, path choice, and each kernel's parameter block (host and device). Pointers carry
// their shape in a comment; strides are in elements. Internal to moe/ (the launchers are in moe.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace rill::cuda::moe {

using bf16 = __nv_bfloat16;

// Decode path (gathered GEMVs) when a step has at most this many (token, expert) pairs: every pair reads its
// expert's weights anyway, so grouping would only add launches.
constexpr int kDecodeMaxPairs = 64;

// Grouped GEMM tiles: 64 slots x 128 output rows x 32 k per stage, 3 cp.async stages, 8 warps as 2 (M) x 4
// (N) warp tiles of 32 x 32 (mma.sync m16n8k16 bf16, fp32 accumulators). Rows are padded to 40 bf16 (80
// bytes) so ldmatrix reads are bank-conflict free. The gate_up GEMM interleaves 8-row blocks of gate and up
// rows in its 128 B rows, so each thread holds gate and up accumulators of the same (slot, column): 64
// columns of I.
constexpr int kBM = 64, kBN = 128, kBK = 32, kStages = 3, kGemmThreads = 256, kLds = kBK + 8;
constexpr int kGateUpCols = kBN / 2;
// MXFP4 grouped GEMM (grouped_gemm_mxfp4.cu): the same tiles; a 32-k stage of a B row is exactly one scale
// group: 16 packed bytes (one cp.async) and one E8M0 byte, dequantised to a bf16 tile before ldmatrix.
constexpr int kMxRowBytes = kBK / 2;
static_assert(kBK == 32, "an MXFP4 B stage holds one 32-column scale group per row");
constexpr int kMaxExperts = 1024;  // the plan kernel scans expert counts with one 1024-thread block

// Routing: one cluster of kRouteTokens CTAs per kRouteTokens tokens; CTA r computes the logits of expert
// slice r for all the cluster's tokens, then gathers the full logit row of token r through distributed shared
// memory.
constexpr int kRouteTokens = 8, kRouteThreads = 512;
constexpr int kRouteMaxGroups = 32;  // group scores live one per lane
// Prefill routing (T >= options.moe_route_gemm_min_tokens): the logits as a cuBLASLt GEMM into
// CudaContext::route_logits, kRouteLogitsFloats floats, in chunks of kRouteLogitsFloats / E tokens (4,096 for
// Kimi Linear's 256 experts, 1,170 for K3's 896), then a selection kernel of kSelectTokens warps per CTA.
constexpr int64_t kRouteLogitsFloats = int64_t(1) << 20;
static_assert(kRouteLogitsFloats >= int64_t(kMaxExperts) * 8, "a decode step's logits ([kGemvMaxRows, E]) fit");
constexpr int kSelectTokens = 8;

enum class Act : int { Silu = 0, Situ = 1 };

struct GroupedGemmParams {
  const bf16* a;  // rows of K: x [T, Hx] (gate_up) or h [P, I] (down)
  int64_t lda;
  const int32_t* slot_row;  // [P] row of `a` feeding each slot (gate_up: the token); nullptr: the slot itself
  const bf16* w;            // stacked expert weights [E, rows, K] (bf16 experts)
  int64_t w_expert_stride, ldw;  // elements (bf16) or bytes (the MXFP4 packed weights)
  // MXFP4 experts (w unused): U8 packed FP4 pairs (low nibble = even column; rows 16-byte aligned) and U8
  // E8M0 scales (one per 32 columns). Packed strides are w_expert_stride / ldw above, in bytes.
  const uint8_t* w_packed;        // [E, rows, K/2]
  const uint8_t* w_scales;        // [E, rows, K/32]
  int64_t s_expert_stride, lds;   // bytes (MXFP4) or floats (FP8)
  // FP8 experts (w unused): E4M3 codes in w_packed (one byte per column, strides above in bytes) and F32
  // scales [E, rows / fp8_block_rows, k blocks]; a scale block spans fp8_stages_per_block 32-column stages
  // (whole rows: any value >= K / 32).
  const float* w_fp8_scales;
  int fp8_block_rows, fp8_stages_per_block;
  const int32_t* expert_offsets;  // [E + 1]: expert e's slots are [offsets[e], offsets[e+1])
  const int32_t* tile_offsets;    // [E + 1]: expert e's first 64-slot tile
  int n_experts, k, n;            // n: output columns (gate_up: I, down: Hx)
  bf16* out;                      // [P, n] row stride ldo
  int64_t ldo;
  Act act;  // gate_up only
  float beta, linear_beta;
};

struct DecodeParams {
  const bf16* x;  // [T, Hx]
  int64_t ldx;
  const int32_t* ids;  // [T, k]
  int64_t ld_ids;
  const float* weights;  // [T, k]
  int64_t ld_weights;
  const bf16* gate_up;  // [E, 2I, Hx]
  int64_t gu_expert_stride, gu_ld;
  const bf16* down;  // [E, Hx, I]
  int64_t dn_expert_stride, dn_ld;
  // MXFP4 experts (WeightFormat::Mxfp4; gate_up / down unused): U8 packed FP4 pairs (low nibble = even
  // column) and U8 E8M0 scales (one per 32 columns). Strides in bytes; the packed strides are gu_* / dn_*
  // above.
  const uint8_t* gu_packed;  // [E, 2I, Hx/2]
  const uint8_t* gu_scales;  // [E, 2I, Hx/32]
  int64_t gus_expert_stride, gus_ld;
  const uint8_t* dn_packed;  // [E, Hx, I/2]
  const uint8_t* dn_scales;  // [E, Hx, I/32]
  int64_t dns_expert_stride, dns_ld;
  // FP8 experts (WeightFormat::Fp8; gate_up / down unused): E4M3 codes at gate_up / down's element strides above,
  // and F32 scales per block of fp8_block_rows x fp8_block_cols (columns a multiple of 8).
  const uint8_t* gu_fp8;       // [E, 2I, Hx]
  const float* gu_fp8_scales;  // [E, 2I / rows, ceil(Hx / cols)]
  int64_t gu8s_expert_stride, gu8s_ld;
  const uint8_t* dn_fp8;       // [E, Hx, I]
  const float* dn_fp8_scales;  // [E, ceil(Hx / rows), ceil(I / cols)]
  int64_t dn8s_expert_stride, dn8s_ld;
  int fp8_block_rows, fp8_block_cols;
  // Shared expert (decode GEMVs only; Is == 0 when there is none): a GLU expert of width Is on the same x, weight 1,
  // added after the routed sum is rounded, in the routed experts' format (bf16, or FP8 with its own blocks). It
  // runs as pair T * k + t of gate_up and as slot k of down; its activations follow the routed pairs' in h.
  const bf16* sh_gate_up;  // [2 Is, Hx]: gate rows, then up rows
  int64_t sh_gu_ld;        // (element strides; for FP8 also of the codes below)
  const bf16* sh_down;  // [Hx, Is]
  int64_t sh_dn_ld;
  const uint8_t* sh_gu_fp8;       // FP8: [2 Is, Hx] codes
  const float* sh_gu_fp8_scales;  // [ceil(2 Is / rows), ceil(Hx / cols)]
  int64_t sh_gu8s_ld;
  const uint8_t* sh_dn_fp8;       // FP8: [Hx, Is] codes
  const float* sh_dn_fp8_scales;  // [ceil(Hx / rows), ceil(Is / cols)]
  int64_t sh_dn8s_ld;
  int sh_fp8_block_rows, sh_fp8_block_cols;
  int Is;
  bf16* h;    // [T * k, I] then [T, Is]: activations of each (token, slot) pair, row = t * k + j; then shared
  bf16* out;  // [T, Hx]
  int64_t ldo;
  int T, k, E, Hx, I;
  Act act;
  float beta, linear_beta;
};

// Grouped GEMMs (grouped_gemm.cu): grid (column tiles, max_tiles); tiles past the plan's last exit at once.
Status launch_grouped_gate_up(const GroupedGemmParams& p, int max_tiles, cudaStream_t stream);
Status launch_grouped_down(const GroupedGemmParams& p, int max_tiles, cudaStream_t stream);
// The same on MXFP4 experts (grouped_gemm_mxfp4.cu): K % 32 == 0.
Status launch_grouped_gate_up_mxfp4(const GroupedGemmParams& p, int max_tiles, cudaStream_t stream);
Status launch_grouped_down_mxfp4(const GroupedGemmParams& p, int max_tiles, cudaStream_t stream);
// The same kernel body on FP8 experts (the Fp8Tile policy): K % 32 == 0, scale blocks of whole 32-column
// stages.
Status launch_grouped_gate_up_fp8(const GroupedGemmParams& p, int max_tiles, cudaStream_t stream);
Status launch_grouped_down_fp8(const GroupedGemmParams& p, int max_tiles, cudaStream_t stream);

}  // namespace rill::cuda::moe
