#include "text/jinja/unicode.h"

#include <algorithm>
#include <cstdint>
#include <span>

namespace rill::text::jinja::unicode {
namespace {

struct CodepointRange {
  char32_t first, last;
};
struct CaseDelta {
  char32_t cp;
  int32_t delta;
};
struct CaseExpansion {
  char32_t cp;
  int n;
  char32_t out[3];
};

#include "text/jinja/unicode_tables.inc"

bool in_ranges(std::span<const CodepointRange> table, char32_t cp) {
  auto it = std::upper_bound(table.begin(), table.end(), cp,
                             [](char32_t c, const CodepointRange& r) { return c < r.first; });
  return it != table.begin() && cp <= std::prev(it)->last;
}

// One full case mapping (Python's _PyUnicode_To*Full): expansions first, then single-code-point deltas.
// Returns false when the character maps to itself.
bool map_case(std::span<const CaseExpansion> expansions, std::span<const CaseDelta> deltas, char32_t cp,
              std::u32string& out) {
  auto e = std::lower_bound(expansions.begin(), expansions.end(), cp,
                            [](const CaseExpansion& x, char32_t c) { return x.cp < c; });
  if (e != expansions.end() && e->cp == cp) {
    out.append(e->out, e->out + e->n);
    return true;
  }
  auto d = std::lower_bound(deltas.begin(), deltas.end(), cp,
                            [](const CaseDelta& x, char32_t c) { return x.cp < c; });
  if (d != deltas.end() && d->cp == cp) {
    out.push_back(static_cast<char32_t>(static_cast<int32_t>(cp) + d->delta));
    return true;
  }
  return false;
}

void append_upper(char32_t cp, std::u32string& out) {
  if (!map_case(kUpperExpansion, kUpperDelta, cp, out)) out.push_back(cp);
}

void append_title(char32_t cp, std::u32string& out) {
  // kTitle* only lists characters whose title case differs from their upper case.
  if (!map_case(kTitleExpansion, kTitleDelta, cp, out)) append_upper(cp, out);
}

bool is_case_ignorable(char32_t cp) {
  return in_ranges(kCaseIgnorable, cp);
}
bool is_lower_cp(char32_t cp) {
  return in_ranges(kLowercase, cp);
}
bool is_upper_cp(char32_t cp) {
  return in_ranges(kUppercase, cp);
}
bool is_title_cp(char32_t cp) {
  return in_ranges(kTitlecase, cp);
}

// Capital sigma lowers to final sigma at the end of a word (CPython's handle_capital_sigma).
char32_t lower_sigma(const std::u32string& s, size_t i) {
  size_t j = i;
  while (j > 0 && is_case_ignorable(s[j - 1])) --j;
  bool final_sigma = j > 0 && is_cased(s[j - 1]);
  if (final_sigma) {
    size_t k = i + 1;
    while (k < s.size() && is_case_ignorable(s[k])) ++k;
    final_sigma = k == s.size() || !is_cased(s[k]);
  }
  return final_sigma ? U'\u03C2' : U'\u03C3';
}

void append_lower(const std::u32string& s, size_t i, std::u32string& out) {
  if (s[i] == U'\u03A3') {
    out.push_back(lower_sigma(s, i));
  } else if (!map_case(kLowerExpansion, kLowerDelta, s[i], out)) {
    out.push_back(s[i]);
  }
}

}  // namespace

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    if (i + n > s.size()) n = static_cast<int>(s.size() - i);
    char32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string encode(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append_utf8(out, cp);
  return out;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    const int n = (b >= 0xC2 && b < 0xE0) ? 2 : (b >= 0xE0 && b < 0xF0) ? 3 : (b >= 0xF0 && b < 0xF5) ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    char32_t cp = n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp < 0xE000)) {
      return false;
    }
    i += n;
  }
  return true;
}

size_t count_codepoints(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool is_space(char32_t cp) {
  return in_ranges(kSpace, cp);
}
bool is_printable(char32_t cp) {
  return !in_ranges(kNotPrintable, cp);
}
bool is_word(char32_t cp) {
  return in_ranges(kWord, cp);
}
bool is_cased(char32_t cp) {
  return in_ranges(kCased, cp);
}

std::string to_upper(std::string_view s) {
  std::u32string out;
  for (char32_t cp : decode(s)) append_upper(cp, out);
  return encode(out);
}

std::string to_lower(std::string_view s) {
  const std::u32string in = decode(s);
  std::u32string out;
  for (size_t i = 0; i < in.size(); ++i) append_lower(in, i, out);
  return encode(out);
}

std::string to_title(std::string_view s) {
  const std::u32string in = decode(s);
  std::u32string out;
  bool previous_is_cased = false;
  for (size_t i = 0; i < in.size(); ++i) {
    if (previous_is_cased) {
      append_lower(in, i, out);
    } else {
      append_title(in[i], out);
    }
    previous_is_cased = is_cased(in[i]);
  }
  return encode(out);
}

std::string capitalize(std::string_view s) {
  const std::u32string in = decode(s);
  std::u32string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (i == 0) {
      append_title(in[i], out);
    } else {
      append_lower(in, i, out);
    }
  }
  return encode(out);
}

std::string swapcase(std::string_view s) {
  const std::u32string in = decode(s);
  std::u32string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (is_upper_cp(in[i])) {
      append_lower(in, i, out);
    } else if (is_lower_cp(in[i])) {
      append_upper(in[i], out);
    } else {
      out.push_back(in[i]);
    }
  }
  return encode(out);
}

std::vector<std::string> split_lines(std::string_view s, bool keepends) {
  const std::u32string c = decode(s);
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const char32_t ch = c[i];
    const bool brk = ch == '\n' || ch == '\r' || ch == 0x0B || ch == 0x0C || ch == 0x1C || ch == 0x1D ||
                     ch == 0x1E || ch == 0x85 || ch == 0x2028 || ch == 0x2029;
    if (!brk) continue;
    size_t e = i + 1;
    if (ch == '\r' && e < c.size() && c[e] == '\n') ++e;
    out.push_back(encode(std::u32string_view(c).substr(b, (keepends ? e : i) - b)));
    b = e;
    i = e - 1;
  }
  if (b < c.size()) out.push_back(encode(std::u32string_view(c).substr(b)));
  return out;
}

bool is_lower(std::string_view s) {
  bool cased = false;
  for (char32_t cp : decode(s)) {
    if (is_upper_cp(cp) || is_title_cp(cp)) return false;
    cased = cased || is_lower_cp(cp);
  }
  return cased;
}

bool is_upper(std::string_view s) {
  bool cased = false;
  for (char32_t cp : decode(s)) {
    if (is_lower_cp(cp) || is_title_cp(cp)) return false;
    cased = cased || is_upper_cp(cp);
  }
  return cased;
}

}  // namespace rill::text::jinja::unicode
