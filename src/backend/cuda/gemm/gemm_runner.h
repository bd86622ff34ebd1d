// GemmRunner: y = x W^T through cuBLASLt (bf16 in, fp32 accumulate, bf16 or f32 out), with a plan
// (descriptors and the chosen algorithm) cached per shape, strides and pointer alignment; MXFP4 weights go
// through the weight-only kernel (K3, not written yet: run() answers Unimplemented).
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cuda/context.h"

namespace rill::cuda {

class GemmRunner {
 public:
  // Creates the cuBLASLt handle and its workspace on `device` (the current device).
  static Result<std::unique_ptr<GemmRunner>> create(int device);
  virtual ~GemmRunner() = default;
  // Enqueues the GEMM on `stream`; never synchronises, except the one-off timing of a new shape when
  // autotuning is on and the stream is not being captured.
  virtual Status run(const backend::GemmArgs& a, cudaStream_t stream) = 0;
  // Off (default): a new shape keeps the heuristic's first algorithm that runs. On: the first call of a shape
  // times the heuristic's top candidates once and keeps the fastest. The backend option
  // gemm_autotune turns it on.
  virtual void set_autotune(bool on) = 0;
  // FP8 weights at prefill-sized M (with scratch): off (default), the weight's bf16 copy and the bf16 GEMM;
  // on, cuBLASLt's block-scaled FP8 matmul on activations quantised per token and 128 columns (128 x 128
  // weight blocks only; other FP8 weights keep the copy). The backend option fp8_gemm = dequant | native.
  virtual void set_fp8_native(bool on) = 0;
};

}  // namespace rill::cuda
