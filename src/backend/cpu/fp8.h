// Exact FP8 (E4M3 with F32 block scales) dequantisation: the CPU's GEMM, MLA and expert paths widen FP8 rows
// with it, so the CPU stays the oracle the CUDA FP8 kernels are checked against.
#pragma once

#include <array>
#include <cstdint>

#include "backend/backend.h"
#include "core/dtype.h"

namespace rill::backend::cpu {

// Every E4M3 code's value, decoded once (f8e4m3_to_f32 is the definition).
inline const float* e4m3_values() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[size_t(c)] = f8e4m3_to_f32(uint8_t(c));
    return t;
  }();
  return table.data();
}

// Row r of an FP8 matrix `codes` F8E4M3 [out, in] with F32 `scales` [ceil(out/rows), ceil(in/cols)] into dst[in]:
// code * scale, in fp32 (exact: a 4-bit significand times an fp32 scale).
inline void dequant_fp8_row(const TensorView& codes, const TensorView& scales, Fp8Blocks block, int64_t r,
                            float* dst) {
  const int64_t in = codes.size(1);
  const uint8_t* q = static_cast<const uint8_t*>(codes.data) + r * codes.stride(0);
  const float* s = static_cast<const float*>(scales.data) + (r / block.rows) * scales.stride(0);
  const float* value = e4m3_values();
  const int64_t cols = block.cols >= in ? in : block.cols;
  for (int64_t c0 = 0, b = 0; c0 < in; c0 += cols, ++b) {
    const float scale = s[b];
    const int64_t c1 = c0 + cols < in ? c0 + cols : in;
    for (int64_t c = c0; c < c1; ++c) dst[c] = value[q[c]] * scale;
  }
}

inline void dequant_fp8_row(const LinearWeight& w, int64_t r, float* dst) {
  dequant_fp8_row(w.weight, w.scales, w.block, r, dst);
}

}  // namespace rill::backend::cpu
