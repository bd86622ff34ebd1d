// Launcher: the decode GEMV (a handful of rows of x against a bf16 weight), memory-bound on the weight.
// cuBLASLt's GEMM kernels reach ~50% of HBM bandwidth at M = 1 on this shape class; this one streams each
// weight row once with 16-byte loads, keeps several loads in flight per lane, and splits rows across warps
// when N is short.
#pragma once

#include "backend/backend.h"
#include "backend/cuda/context.h"

namespace rill::cuda {

inline constexpr int kGemvMaxRows = 4;

// True when `a` fits the GEMV: M <= kGemvMaxRows, a dense bf16 or FP8 weight, aligned rows, K % 8 == 0.
bool gemv_eligible(const backend::GemmArgs& a);
// sm_count: the device's multiprocessors (CudaContext::sm_count), which bound how far short rows are split.
Status launch_gemv(const backend::GemmArgs& a, int sm_count, cudaStream_t stream);
// Every part GEMV-eligible with the same M, and no 8-code FP8 part beside parts of another format: then
// launch_gemv_group runs them all in one launch (bf16 and FP8 parts mixed, each read with its own policy).
// With an input norm (a.norm, where gemv_group_fuses_norm: every part on the GEMV) it runs one launch per run
// of parts that can share one, the norm folded into the first.
bool gemv_group_eligible(const backend::GemmGroupArgs& a);
Status launch_gemv_group(const backend::GemmGroupArgs& a, const CudaContext& cx);
// Whether the GEMV can fold add_rms_norm `n` into its prologue (gemv.cuh's GemvNorm): an F32 residual, M <= 4
// rows on add_rms_norm's 8-wide path, and the normed rows plus `tail_smem` bytes (a tail's shared memory) within
// kGemvMaxSmem.
bool gemv_norm_fusable(const backend::AddRmsNormArgs& n, size_t tail_smem);
bool gemv_group_fuses_norm(const backend::GemmGroupArgs& a);
// The fused norm's dynamic shared memory: the M normed rows of width K, bf16, rounded up to 16 bytes.
size_t gemv_norm_smem(int64_t M, int64_t K);
// Dynamic shared memory a GEMV launch may take without opting in (48 KB): 4 rows of up to 6144.
inline constexpr size_t kGemvMaxSmem = 48 * 1024;
// Warps per output row (1, 2, 4 or 8) for N rows of `chunks` 16-byte loads each on a device of `sm_count`
// multiprocessors: more for short N while the warps fit one wave, never below one 32-lane pass.
int gemv_split(int64_t N, int64_t chunks, int sm_count);

}  // namespace rill::cuda
