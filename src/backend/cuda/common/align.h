// Alignment helpers of the host code under backend/cuda (scratch carving, 16-byte vector paths), defined
// once.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rill::cuda {

// x rounded up to a multiple of 256 bytes: every scratch piece starts 256-aligned (cudaMalloc's alignment).
inline size_t align256(size_t x) {
  return (x + 255) / 256 * 256;
}
// Whether p may be read and written as 16-byte vectors.
inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

}  // namespace rill::cuda
