// Helpers shared by the CPU op families: typed row access and the weight-dtype dispatch.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/backend.h"
#include "core/thread_pool.h"

namespace rill::backend::cpu {

// Row r of a 2-D view with F32 elements (rows may be strided).
inline float* row_f32(const TensorView& t, int64_t r) { return t.ptr<float>() + r * t.stride(0); }

// Widens n elements of a float-typed weight row to f32.
inline void widen_row(const void* src, DType dtype, int64_t n, float* dst) {
  switch (dtype) {
    case DType::F32: {
      const float* s = static_cast<const float*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
      return;
    }
    case DType::BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = load_as_f32(src, dtype, size_t(i));
  }
}

// Pointer to row r of a 2-D weight (any element size).
inline const void* weight_row(const TensorView& w, int64_t r) {
  return static_cast<const char*>(w.data) + r * w.stride(0) * int64_t(dtype_size(w.dtype));
}

// Dot product with eight independent partial sums (lets the compiler vectorise without -ffast-math).
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

inline ThreadPool& pool() { return default_thread_pool(); }

}  // namespace rill::backend::cpu
