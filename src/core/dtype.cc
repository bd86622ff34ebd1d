#include "core/dtype.h"

#include <algorithm>
#include <cmath>

namespace rill {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::F32: return 4;
    case DType::F8E4M3: return 1;
    case DType::U8: return 1;
    case DType::I8: return 1;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::Bool: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F32: return "F32";
    case DType::F8E4M3: return "F8_E4M3";
    case DType::U8: return "U8";
    case DType::I8: return "I8";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::Bool: return "BOOL";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view s) {
  for (DType t : {DType::BF16, DType::F16, DType::F32, DType::F8E4M3, DType::U8, DType::I8, DType::I32,
                  DType::I64, DType::Bool}) {
    if (dtype_name(t) == s) return t;
  }
  return std::nullopt;
}

bool dtype_is_float(DType t) {
  return t == DType::BF16 || t == DType::F16 || t == DType::F32 || t == DType::F8E4M3;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(float(man), -24);  // zero or subnormal
  } else if (exp == 31) {
    v = man ? NAN : INFINITY;
  } else {
    v = std::ldexp(float(man | 0x400), int(exp) - 25);
  }
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000;
  const uint32_t abs = u & 0x7fffffff;
  if (abs >= 0x7f800000) return uint16_t(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0));
  if (abs >= 0x477ff000) return uint16_t(sign | 0x7c00);  // rounds to inf
  if (abs < 0x38800000) {                                   // subnormal or zero in f16
    const float a = std::fabs(f);
    const uint32_t m = uint32_t(std::nearbyint(a * 16777216.0f));  // units of 2^-24, ties to even
    return uint16_t(sign | m);
  }
  uint32_t r = abs + 0xfff + ((abs >> 13) & 1);  // round to nearest even at bit 13
  return uint16_t(sign | ((r - 0x38000000) >> 13));
}

float f8e4m3_to_f32(uint8_t b) {
  const uint32_t sign = b >> 7, exp = (b >> 3) & 0xf, man = b & 7;
  if (exp == 0xf && man == 7) return NAN;
  float v = exp == 0 ? std::ldexp(float(man), -9) : std::ldexp(float(man | 8), int(exp) - 10);
  return sign ? -v : v;
}

uint8_t f32_to_f8e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a >= kF8E4M3Max) return sign | 0x7e;  // saturate (also +-inf)
  // Below 2^-6 the code is subnormal: units of 2^-9. Above, 3 mantissa bits at the value's exponent. Scaling by
  // a power of two is exact, so nearbyint (ties to even in the default rounding mode) rounds once.
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int exp = std::max(e - 1, -6);  // unbiased exponent of the code (subnormals share -6)
  const float units = std::nearbyint(std::ldexp(a, 3 - exp));  // value in units of 2^(exp-3)
  // units in [8, 16] for normals (16 carries into the next exponent), [0, 8] for subnormals.
  int biased = exp + 7, man = int(units);
  if (man >= 16) {
    man = 8;
    ++biased;
  }
  if (man < 8) return sign | uint8_t(man);  // subnormal (or zero, or rounded up to the smallest normal below)
  return sign | uint8_t(biased << 3) | uint8_t(man & 7);
}

float load_as_f32(const void* data, DType t, size_t i) {
  switch (t) {
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::F32: return static_cast<const float*>(data)[i];
    case DType::F8E4M3: return f8e4m3_to_f32(static_cast<const uint8_t*>(data)[i]);
    case DType::U8: return float(static_cast<const uint8_t*>(data)[i]);
    case DType::I8: return float(static_cast<const int8_t*>(data)[i]);
    case DType::I32: return float(static_cast<const int32_t*>(data)[i]);
    case DType::I64: return float(static_cast<const int64_t*>(data)[i]);
    case DType::Bool: return static_cast<const uint8_t*>(data)[i] ? 1.0f : 0.0f;
  }
  return 0.0f;
}

}  // namespace rill
