// Counter-based random numbers (a SplitMix64 hash of (seed, counter)): the same sample for the same
// (seed, step, row) on every backend and thread, so seeded sampling is reproducible per request.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define RILL_HOST_DEVICE __host__ __device__
#else
#define RILL_HOST_DEVICE
#endif

namespace rill {

RILL_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 24 random bits (exactly representable as f32).
RILL_HOST_DEVICE inline float uniform01(uint64_t seed, uint64_t counter) {
  return float(mix64(seed ^ mix64(counter)) >> 40) * (1.0f / 16777216.0f);
}

}  // namespace rill
