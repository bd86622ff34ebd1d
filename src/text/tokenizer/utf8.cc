#include "text/tokenizer/utf8.h"

namespace rill::text {
namespace {

// Expected length of the sequence a lead byte starts (0: not a lead byte) and the valid range of its
// second byte (Unicode Table 3-7); later bytes are always 80..BF.
struct Lead {
  int len;
  unsigned char lo, hi;
};

Lead lead_of(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Number of bytes from p that continue the sequence validly (>= 1 for a lead byte), capped at lead.len.
int valid_prefix(const unsigned char* p, const unsigned char* end, const Lead& lead) {
  int k = 1;
  for (; k < lead.len && p + k < end; ++k) {
    const unsigned char lo = k == 1 ? lead.lo : 0x80, hi = k == 1 ? lead.hi : 0xBF;
    if (p[k] < lo || p[k] > hi) break;
  }
  return k;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

void utf8_append_sanitized(std::string_view bytes, std::string& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto* end = p + bytes.size();
  out.reserve(out.size() + bytes.size());
  while (p < end) {
    // Copy the longest run of ASCII and well-formed sequences at once.
    const unsigned char* run = p;
    while (p < end) {
      if (*p < 0x80) {
        ++p;
        continue;
      }
      const Lead lead = lead_of(*p);
      if (lead.len == 0 || valid_prefix(p, end, lead) != lead.len) break;
      p += lead.len;
    }
    out.append(reinterpret_cast<const char*>(run), p - run);
    if (p == end) break;
    const Lead lead = lead_of(*p);
    p += lead.len == 0 ? 1 : valid_prefix(p, end, lead);
    out.append(kReplacement);
  }
}

size_t utf8_incomplete_tail(std::string_view bytes) {
  const auto* begin = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto* end = begin + bytes.size();
  for (size_t back = 1; back <= 3 && back <= bytes.size(); ++back) {
    const unsigned char* p = end - back;
    if ((*p & 0xC0) == 0x80) continue;  // a continuation byte: the lead is further back
    const Lead lead = lead_of(*p);
    if (lead.len <= 1 || static_cast<size_t>(lead.len) <= back) return 0;
    return valid_prefix(p, end, lead) == static_cast<int>(back) ? back : 0;
  }
  return 0;
}

bool utf8_is_valid(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto* end = p + bytes.size();
  while (p < end) {
    int len;
    if (utf8_decode(p, end, &len) == kInvalidCodePoint) return false;
    p += len;
  }
  return true;
}

}  // namespace rill::text
