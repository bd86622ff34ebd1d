// The dynamic shared-memory opt-in of kernels that need more than 48 KiB, defined once (host-only).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/context.h"
#include "core/status.h"

namespace rill::cuda {

// Raises `kernel`'s dynamic shared-memory limit to `bytes` once per device (`done_devices`: one bit per
// device index, a static of the caller's); Unavailable, naming `op`, when the device allows less.
Status opt_in_smem(const char* op, const void* kernel, size_t bytes, const CudaContext& cx,
                   std::atomic<uint64_t>* done_devices);

}  // namespace rill::cuda
