// Private to src/io: makes untrusted bytes (tensor names, JSON snippets) safe to put in an error message.
#pragma once

#include <string>
#include <string_view>

namespace rill::io {

// Escapes control and non-ASCII bytes as \xNN and cuts after `max_chars`, so a hostile header cannot put
// terminal escapes or a megabyte-long name into a log line or an HTTP error body.
inline std::string printable(std::string_view s, size_t max_chars = 160) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (out.size() >= max_chars) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f || c == '\\') {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += char(c);
    }
  }
  return out;
}

}  // namespace rill::io
