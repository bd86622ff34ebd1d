// Element types rill reads from checkpoints and computes in, with exact host conversions.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace rill {

// The safetensors dtypes the spec names (spec §2.1, issue "Foundation").
enum class DType : uint8_t { BF16, F16, F32, F8E4M3, U8, I8, I32, I64, Bool };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // the safetensors spelling: "BF16", "F8_E4M3", "BOOL", ...
std::optional<DType> dtype_from_name(std::string_view safetensors_name);
bool dtype_is_float(DType t);

// bf16 <-> f32. bf16 is the top half of an f32, so widening is exact; narrowing rounds to nearest even.
inline float bf16_to_f32(uint16_t bits) {
  uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
// Rounds an f32 to the nearest bf16 value, returned as f32 (the "cast to bf16" of a reference).
inline float round_to_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float f);
float f8e4m3_to_f32(uint8_t bits);  // OCP E4M3 (finite-only, NaN = S.1111.111), as safetensors F8_E4M3
// The nearest E4M3 value, ties to even (torch's `to(float8_e4m3fn)` and cvt.rn.satfinite); magnitudes past the
// largest finite 448 saturate to +-448 (E4M3 has no infinity), NaN -> 0x7f. Quantised weights divide by their
// block's amax/448 first, so saturation only absorbs rounding at the top.
uint8_t f32_to_f8e4m3(float f);
inline constexpr float kF8E4M3Max = 448.0f;

// Reads element i of a contiguous array of float type `t` as f32 (for small tensors and tests, not hot loops).
float load_as_f32(const void* data, DType t, size_t i);

}  // namespace rill
