// UTF-8 helpers shared by the pre-tokenizer, the chunking guard and the detokenizers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rill::text {

inline constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFFu;

// Decodes the scalar value at p (p < end) and sets *len to its byte length. An ill-formed byte decodes as
// kInvalidCodePoint with *len = 1 (overlongs, surrogates and values past U+10FFFF are ill-formed).
inline uint32_t utf8_decode(const unsigned char* p, const unsigned char* end, int* len) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  *len = 1;
  const ptrdiff_t avail = end - p;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (avail < 2 || (p[1] & 0xC0) != 0x80) return kInvalidCodePoint;
    *len = 2;
    return (uint32_t(b0 & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (avail < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return kInvalidCodePoint;
    const uint32_t cp = (uint32_t(b0 & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)) return kInvalidCodePoint;
    *len = 3;
    return cp;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (avail < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) {
      return kInvalidCodePoint;
    }
    const uint32_t cp = (uint32_t(b0 & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) |
                        (uint32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    if (cp < 0x10000 || cp > 0x10FFFF) return kInvalidCodePoint;
    *len = 4;
    return cp;
  }
  return kInvalidCodePoint;
}

// Appends `bytes` to `out` with every maximal ill-formed subpart replaced by U+FFFD (Unicode §3.9, what
// Python's bytes.decode("utf-8", "replace") and therefore the reference decode do).
void utf8_append_sanitized(std::string_view bytes, std::string& out);

// Length of a trailing sequence that is a valid but incomplete prefix of a character (0..3): the bytes a
// streaming decoder must hold back because the next token may complete them.
size_t utf8_incomplete_tail(std::string_view bytes);

// True when `bytes` is well-formed UTF-8.
bool utf8_is_valid(std::string_view bytes);

}  // namespace rill::text
