// Launcher: the staging of the native FP8 prefill GEMM (issue #35; cuBLASLt's block-scaled FP8 matmul on
// Hopper, behind the backend option fp8_gemm=native): x quantised to E4M3 per token and 128-column group,
// DeepSeek style (scale = amax / 448, so x ~ code * scale), and the weight's 128 x 128 block scales copied to
// the layout cuBLASLt reads. Scratch layout (each piece 256-byte aligned): codes [M, K], x scales [K/128, M]
// (M-major), weight scales [ceil(N/128), ld] with ld = K/128 rounded up to 4 (fp8_native.cu kPadScales).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"

namespace rill::cuda {

struct Fp8NativeStage {
  void* codes = nullptr;      // E4M3 [M, K], row stride K
  float* x_scales = nullptr;  // [K / 128, M]
  float* w_scales = nullptr;  // [ceil(N / 128), w_scale_ld]
  int64_t w_scale_ld = 0;
  size_t bytes = 0;  // the three pieces
};

// What the native path takes: a 128 x 128 block-scaled weight, K % 128 == 0, N % 16 == 0, 16-byte aligned
// weight rows, bf16 x with 16-byte aligned rows, bf16 out.
bool fp8_native_eligible(const backend::GemmArgs& a);
// The scratch layout for M rows of x against w, at `base` (nullptr when planning: sizes only).
Fp8NativeStage fp8_native_stage(int64_t M, const backend::LinearWeight& w, void* base);
Status launch_fp8_native_stage(const backend::GemmArgs& a, const Fp8NativeStage& s, cudaStream_t stream);
// How activations are scaled when quantised: per token and 128-column group (DeepSeek's, beside 128 x 128
// weight blocks: scales [K / 128, M]), or per token over the whole row (vLLM's ptpc_fp8, beside per-channel
// weights: scales [M]).
enum class Fp8ActScaling { Group128, PerToken };

// The activation half of the staging alone (also the FP8 grouped experts' A, moe/grouped_wgmma.cu
// Fp8Weights and Fp8ChannelWeights): bf16 x [M, K] (row stride ldx, 16-byte aligned rows, K % 128 == 0 for
// Group128, % 8 for PerToken; 16-byte aligned codes) to E4M3 codes [M, K] and scales as `scaling` says.
Status launch_fp8_quantize_rows(const void* x, int64_t ldx, int64_t M, int64_t K, void* codes,
                                float* x_scales, Fp8ActScaling scaling, cudaStream_t stream);
// The same with the rows gathered: code row m from x row src_rows[m], for m < *n_valid (device values; the
// rows past it are not written). The FP8 grouped experts quantise x straight into expert order with it
// instead of gathering bf16 rows first and quantising those (one pass over the slots instead of three).
Status launch_fp8_quantize_gathered_rows(const void* x, int64_t ldx, const int32_t* src_rows,
                                         const int32_t* n_valid, int64_t M, int64_t K, void* codes,
                                         float* x_scales, Fp8ActScaling scaling, cudaStream_t stream);

}  // namespace rill::cuda
