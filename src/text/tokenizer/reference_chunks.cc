#include "text/tokenizer/reference_chunks.h"

#include "text/tokenizer/unicode_classes.h"
#include "text/tokenizer/utf8.h"

namespace rill::text {
namespace {

// _split_whitespaces_or_nonwhitespaces(s, kMaxRunChars), appending the non-empty slices.
void split_runs(std::string_view s, std::vector<std::string_view>& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  size_t run_len = 0, slice_start = 0;
  bool run_is_space = false;
  for (size_t i = 0; i < s.size();) {
    int len = 1;
    bool is_space;
    if (p[i] < 0x80) {
      is_space = python_isspace(p[i]);
    } else {
      const uint32_t cp = utf8_decode(p + i, end, &len);
      is_space = cp != kInvalidCodePoint && python_isspace(cp);
    }
    if (i == 0) run_is_space = is_space;  // `s[0].isspace()`
    if (run_is_space != is_space) {
      run_len = 1;
      run_is_space = is_space;
    } else if (++run_len > kMaxRunChars) {
      if (i > slice_start) out.push_back(s.substr(slice_start, i - slice_start));
      slice_start = i;
      run_len = 1;
    }
    i += len;
  }
  if (s.size() > slice_start) out.push_back(s.substr(slice_start));
}

}  // namespace

std::vector<std::string_view> split_reference_chunks(std::string_view text) {
  std::vector<std::string_view> out;
  if (text.size() <= kMaxEncodeChars) {  // at most 400,000 bytes: one 400,000-char piece
    split_runs(text, out);
    return out;
  }
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  for (size_t start = 0; start < text.size();) {
    size_t stop = start;
    for (size_t n = 0; n < kMaxEncodeChars && stop < text.size(); ++n) {
      int len;
      utf8_decode(p + stop, end, &len);
      stop += len;
    }
    split_runs(text.substr(start, stop - start), out);
    start = stop;
  }
  return out;
}

}  // namespace rill::text
