// RILL_CUDA_CHECK: turns a failed CUDA runtime call into a Status naming the call (every call is checked).
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"

#define RILL_CUDA_CHECK(call)                                                                          \
  do {                                                                                                 \
    const cudaError_t rill_err_ = (call);                                                              \
    if (rill_err_ != cudaSuccess)                                                                      \
      return ::rill::internal_error("{} failed: {} ({}:{})", #call, cudaGetErrorString(rill_err_), __FILE__, \
                                    __LINE__);                                                         \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at the next sync.
#define RILL_CUDA_CHECK_LAUNCH(name)                                                                       \
  do {                                                                                                     \
    const cudaError_t rill_err_ = cudaGetLastError();                                                      \
    if (rill_err_ != cudaSuccess)                                                                          \
      return ::rill::internal_error("kernel {} failed to launch: {}", name, cudaGetErrorString(rill_err_)); \
  } while (0)
