// The dynamic shared-memory opt-in of kernels that need more than 48 KiB, defined once (host-only).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/context.h"
#include "core/status.h"

namespace rill::cuda {

// Raises `kernel`'s dynamic shared-memory limit to `bytes`; Unavailable, naming `op`, when the device allows
// less. A kernel whose size is fixed opts in once per device (`done_devices`: one bit per device index, a
// static of the caller's); one whose size depends on the shape passes nullptr and opts in on every call that
// needs more than the default 48 KiB (a later call may need more than an earlier one).
Status opt_in_smem(const char* op, const void* kernel, size_t bytes, const CudaContext& cx,
                   std::atomic<uint64_t>* done_devices);

}  // namespace rill::cuda
