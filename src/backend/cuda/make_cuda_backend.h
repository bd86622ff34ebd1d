// The only CUDA-backend header other folders include: no CUDA types here (style.md §7.4).
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cuda_backend_options.h"

namespace rill::backend {

// The CUDA backend on `device` with `options`; fails with a clear message when no usable GPU is present.
Result<std::unique_ptr<Backend>> make_cuda_backend(int device, const CudaBackendOptions& options = {});

}  // namespace rill::backend
