// The only CUDA-backend header other folders include: no CUDA types here (style.md §7.4).
#pragma once

#include <memory>

#include "backend/backend.h"

namespace rill::backend {

// The CUDA backend on `device`; fails with a clear message when no usable GPU is present.
Result<std::unique_ptr<Backend>> make_cuda_backend(int device);

}  // namespace rill::backend
