// Launcher: an FP8 weight (E4M3 [N, K], F32 scales per block) dequantised to a bf16 copy [N, K] (row stride
// K) in scratch, for the prefill GEMM of FP8 dense weights (cuBLASLt's bf16 GEMM on the copy; issue #35). One
// memory-bound pass: reads N K bytes, writes 2 N K.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "backend/backend.h"

namespace rill::cuda {

// FP8 GEMMs of more rows than this take the bf16 copy (or, under fp8_gemm=native, the FP8 matmul); up to it
// the FP8 GEMV in groups of kGemvMaxRows, which reads the weight's bytes once per group: 16 rows read 4 bytes
// per weight, as many as the copy writes and cuBLASLt then reads (a byte count; the crossover is not measured).
inline constexpr int kFp8GemvMaxRows = 16;

// Scratch bytes of the bf16 copy of `w` (256-byte aligned): 2 N K.
size_t fp8_dequant_bytes(const backend::LinearWeight& w);
// out: fp8_dequant_bytes(w) bytes, 16-byte aligned. out[n, k] = bf16(float(code[n, k]) * scale(n, k)), one
// rounding of the exact fp32 product (the FP8 GEMV's weight is that fp32 value).
Status launch_fp8_dequant_bf16(const backend::LinearWeight& w, void* out, cudaStream_t stream);

}  // namespace rill::cuda
