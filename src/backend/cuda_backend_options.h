// CudaBackendOptions: the CUDA backend's kernel-path switches, explicit per backend (no environment variables
// under backend/). Set from the commands that make a backend (`--backend-option key=value`, cli/common.h) and
// by tests, which make one backend per setting and so cover both paths of a switch in one program. No CUDA
// types here: the CLI and the CPU-only build include it (C++17-clean too: cuda/context.h holds one). The
// defaults are the measured-faster paths.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"

namespace rill::backend {

// Which kernel runs the MLA prefill attention (mla/README.md): cuDNN 9's fused attention or rill's flash kernel.
enum class MlaPrefillPath { Auto, Cudnn, Rill };

struct CudaBackendOptions {
  // Programmatic dependent launch on every kernel launched through cuda::launch() (common/launch.h); off:
  // plain stream order (the kernels' waits become no-ops). `pdl`.
  bool pdl = true;
  // The fused KDA decode step (kda/decode_fused.cu) for steps of at least two sequences, and for one whose
  // heads fill at most a quarter of the SMs (Kimi Linear's batch 1: the split form, a cluster of 4 CTAs a
  // head); off: the f_b / g_b GEMV and the separate prepare/recurrent/norm ops. Measured on the H100
  // (2026-12-07, FP8 48B `ptpc_fp8`, graphed steps at 4K, fused against separate): batch 1 with the split
  // form 2.656-2.666 against 2.726-2.733 ms (one CTA a head: 2.95-2.98 against 2.87-2.90), batch 2 3.52-3.59
  // against 3.52-3.59, batch 4 5.39-5.40 against 5.44-5.58, batch 8 9.32-9.37 against 9.69-9.76, batch 16
  // 10.42-10.53 against 10.96-11.02. `kda_fused_decode`.
  bool kda_fused_decode = true;
  // Verify-sized KDA sequences (up to kda::kRecurrentMaxTokens tokens) through the recurrent kernel; off: the
  // chunked prefill path. `kda_recurrent_verify`.
  bool kda_recurrent_verify = true;
  // The chunk kernel's intra phase computes [W | U] = (I + L)^-1 [β 2^Γ k̂ | β v] by inverting (I + L) in
  // fp32 by 16-row blocks and multiplying on the tensor cores (kda/chunk_intra.cu solve_tensor); off: forward
  // substitution, one column per thread (solve_column), the default: the tensor-core solve passes its op
  // tests and compute-sanitizer on the H100 but measured slower there (2026-12-07, chunk op at 8K
  // tokens 1.033 ms against 0.977, at 32K 3.97 against 3.76; the FP8 48B's 8K prompt 133.3 against 132.6 ms).
  // Kept as the starting point for a version that uses its lower register count (96 against 128) for
  // occupancy. No scratch changes, so Backend::set_option may flip it between steps.
  // `kda_intra_tensor_solve`.
  bool kda_intra_tensor_solve = false;
  // The shared expert inside the bf16 MoE decode GEMVs; off: gemm, glu, gemm, add. `moe_fuse_shared`.
  bool moe_fuse_shared = true;
  // Decode-batch (T <= kGemvMaxRows) launches folded into the GEMVs (cuda/README.md): the router's expert
  // selection in its logits GEMV's last CTA, and the residual add + RMSNorm before a projection in that
  // projection's GEMV. Same results either way (the same arithmetic); off: the separate kernels.
  // `decode_fusion`. Off: its op and model tests pass on the H100, but it measured no faster there (2026-12-06,
  // the FP8 48B, graphed decode at 4K: batch 1 3.110 ms on against 3.066 off, batch 8 10.62 against 10.60).
  bool decode_fusion = false;
  // Row cap of one MLA prefill context-expansion group (mla/README.md); 0: the kernel's default
  // (mla::kExpandRows). Tests set 64 so two prefill sequences take several groups. `mla_expand_rows`.
  int mla_expand_rows = 0;
  // cuBLASLt algorithm autotuning per GEMM shape (gemm/); off: the heuristic's first choice. `gemm_autotune`.
  bool gemm_autotune = false;
  // The bf16 expert GEMMs of grouped MoE steps with at least moe_cublas_min_pairs (token, expert) pairs through
  // cuBLAS's grouped GEMM (moe/cublas_grouped.h; never inside a graph capture); off: rill's mma.sync grouped
  // kernels for every grouped step. `moe_cublas_grouped`, `moe_cublas_min_pairs`. Neither changes the scratch
  // a step plans, so Backend::set_option may flip them between steps (the benchmark's A/B). The threshold is
  // the smallest measured size: on an H100 (2026-12-06, 48B shape) cuBLAS took 0.70 / 1.21 / 1.35 / 1.91 /
  // 4.92 ms for 32 / 256 / 512 / 2048 / 8192 tokens x top-8 where rill's kernels took 0.91 / 1.64 / 1.85 /
  // 2.49 / 6.70, its per-layer count readback included.
  bool moe_cublas_grouped = true;
  int moe_cublas_min_pairs = 256;
  // Dense FP8 GEMMs above the GEMV's rows: a bf16 copy of the weight in scratch and the bf16 GEMM (dequant,
  // the default) or cuBLASLt's block-scaled FP8 matmul on activations quantised per token and 128 columns
  // (native; measured on the H100, 2026-12-06: the FP8 48B's 8K prompt 136.1 ms native against 133.3 with
  // the bf16 copies, which run at 98.6% of the bf16 ceiling). It changes the scratch a GEMM plans:
  // Backend::set_option may change it only before a step is planned. `fp8_gemm` = dequant | native.
  bool fp8_gemm_native = false;
  // MLA prefill attention (mla/cudnn_sdpa.h): auto (the default) takes cuDNN's fused attention where the build
  // has cuDNN (RILL_CUDNN) and cuDNN plans the step's shape, else rill's flash kernel (a refused shape is logged
  // once); cudnn takes cuDNN or fails the step (tests and the benchmark's A/B, so a fallback cannot pass for
  // cuDNN); rill takes rill's kernel. H100, cuDNN 9.14, T = 2048 x 32 heads: 0.198 ms against 0.365 ms. It
  // changes the scratch a step plans (cuDNN's K copy): Backend::set_option may change it only before a step is
  // planned. Prefill steps inside a CUDA graph capture take rill's kernel.
  // `mla_prefill` = auto | cudnn | rill.
  MlaPrefillPath mla_prefill = MlaPrefillPath::Auto;
  // The bf16 expert GEMMs of grouped MoE steps through rill's Hopper kernel (moe/grouped_wgmma.cu: TMA,
  // mbarriers, wgmma, persistent CTAs; sm_90 devices only, graph-capturable), ahead of cuBLAS and the
  // mma.sync kernels wherever it takes the shapes; off: cuBLAS, then the mma.sync kernels. Measured on the H100
  // (2026-12-06, 48B shape, route + experts): 4.46 / 1.90 / 1.32 / 1.20 / 0.66 ms for 8192 / 2048 / 512 / 256 /
  // 32 tokens x top-8 where cuBLAS took 5.04 / 1.94 / 1.39 / 1.22 / 0.68 (composed 48B: an 8K prompt 188.5 ms
  // against 205.7). A graph can hold it (no host readback); which decode batches run from graphs is still
  // CudaBackend::graph_max_expert_pairs' measured limit. It does not change the scratch a step plans, so
  // Backend::set_option may flip it between steps. `moe_wgmma`.
  bool moe_wgmma = true;
  // FP8 experts (E4M3, 128 x 128 weight blocks) of grouped MoE steps through the same Hopper kernel structure
  // with FP8 operands (moe/grouped_wgmma.cu Fp8Weights: activations quantised per row and 128 columns, wgmma
  // k32 e4m3, each 128-column block's product scaled into fp32); off: the mma.sync grouped GEMM that
  // dequantises to bf16 tiles. Measured on the H100 (2026-12-06, 48B shape, route + experts): 3.39 / 1.27 /
  // 0.81 / 0.71 ms for 8192 / 2048 / 512 / 256 tokens x top-8 where the mma.sync GEMM took 7.28 / 2.48 / 1.34
  // / 1.21; the whole FP8 48B's 8K prompt 164.6 ms against 266.8. The scratch a step plans holds its
  // quantised activations either way, so Backend::set_option may flip it between steps. `moe_wgmma_fp8`.
  bool moe_wgmma_fp8 = true;
  // MXFP4 experts (K3's) of grouped MoE steps of at least moe_wgmma_mxfp4_min_pairs (token, expert) pairs
  // through the bf16 Hopper kernel's body with its MXFP4 weight policy (moe/grouped_wgmma.cu Mxfp4Weights:
  // packed codes by TMA, dequantised to bf16 in shared memory by the consumer warpgroups, wgmma m64n256k16;
  // Hx and I multiples of 64); off, or smaller steps: the mma.sync grouped GEMM that dequantises 32-column
  // tiles (moe/grouped_gemm_mxfp4.cu). Measured on the H100 (2026-12-07, K3 slice, 896 experts, top-16):
  // route + experts 27.9 / 12.3 ms for 8192 / 2048 tokens where the mma.sync GEMM took 52.6 / 18.4-19.7; the
  // slice's 512- and 256-token prompts 54.5 / 47.1 ms against 60.6 / 53.8, its decode step of 32 sequences
  // (512 pairs) 27.2 against 29.1 ms; so the threshold is the smallest step measured faster (512 pairs; below
  // E / 4 pairs the GEMVs take the step anyway). No scratch changes, so Backend::set_option may change either
  // between steps. `moe_wgmma_mxfp4`, `moe_wgmma_mxfp4_min_pairs`.
  bool moe_wgmma_mxfp4 = true;
  int moe_wgmma_mxfp4_min_pairs = 512;
  // Router logits of steps of at least this many tokens as a cuBLASLt GEMM followed by a selection kernel
  // (moe/route.cu); fewer: the router's cluster kernel (each cluster of 8 CTAs reads the whole router per 8
  // tokens). Steps of at most kGemvMaxRows tokens take the split GEMV either way. Measured on the H100
  // (2026-12-06, 48B router, 256 x 2304): the GEMM path 0.025 / 0.026 / 0.025 / 0.027 / 0.243 ms for 8 / 64 /
  // 256 / 2048 / 32768 tokens where the cluster kernel took 0.029 / 0.029 / 0.056 / 0.252 / 3.69, so the
  // threshold is the smallest size measured. No scratch changes, so Backend::set_option may change it between
  // steps (the benchmark's A/B). `moe_route_gemm_min_tokens`.
  int moe_route_gemm_min_tokens = 8;
};

// "auto", "cudnn" or "rill": the value of mla_prefill that selects `p`.
const char* mla_prefill_name(MlaPrefillPath p);

// Applies one "key=value" (keys as above; booleans 0/1/true/false/on/off); an error names the key or value
// and lists the keys.
Status set_cuda_backend_option(CudaBackendOptions& o, std::string_view key_value);
// Applies each "key=value" in order.
Result<CudaBackendOptions> parse_cuda_backend_options(const std::vector<std::string>& key_values);
// The keys, for help texts: "pdl, kda_fused_decode, ...".
std::string cuda_backend_option_keys();

// make_backend (backend.h) with the CUDA backend's options; the CPU backend takes none and ignores them.
Result<std::unique_ptr<Backend>> make_backend(std::string_view name, const CudaBackendOptions& options);

}  // namespace rill::backend
