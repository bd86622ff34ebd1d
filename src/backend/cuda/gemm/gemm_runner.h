// GemmRunner: y = x W^T through cuBLASLt (bf16 in, fp32 accumulate, bf16 or f32 out), with the heuristic's
// best algorithm cached per shape; MXFP4 weights go through the weight-only kernel (K3).
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cuda/context.h"

namespace rill::cuda {

class GemmRunner {
 public:
  static Result<std::unique_ptr<GemmRunner>> create(int device);
  virtual ~GemmRunner() = default;
  virtual Status run(const backend::GemmArgs& a, cudaStream_t stream) = 0;
};

}  // namespace rill::cuda
