// Exact MXFP4 (compressed-tensors mxfp4-pack-quantized) dequantisation, spec §2.4.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/backend.h"

namespace rill::backend::cpu {

// FP4 E2M1 code -> value: sign bit 3, magnitude {0, .5, 1, 1.5, 2, 3, 4, 6}.
inline float fp4_e2m1_value(uint8_t code) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMag[code & 7];
  return (code & 8) ? -m : m;
}

// E8M0 scale byte -> 2^(s - 127); 255 is NaN.
inline float e8m0_value(uint8_t s) { return s == 255 ? NAN : std::ldexp(1.0f, int(s) - 127); }

// Row r of an MXFP4 weight [out, in] into `dst[in]`: low nibble = even column, one scale per 32 columns.
inline void dequant_mxfp4_row(const LinearWeight& w, int64_t r, float* dst) {
  const int64_t in = w.in_features();
  const uint8_t* packed = static_cast<const uint8_t*>(w.weight.data) + r * w.weight.stride(0);
  const uint8_t* scales = static_cast<const uint8_t*>(w.scales.data) + r * w.scales.stride(0);
  for (int64_t j = 0; j < in / 2; ++j) {
    const float s = e8m0_value(scales[(2 * j) / 32]);
    dst[2 * j] = fp4_e2m1_value(packed[j] & 0xF) * s;
    dst[2 * j + 1] = fp4_e2m1_value(packed[j] >> 4) * s;
  }
}

}  // namespace rill::backend::cpu
