#include "text/tokenizer/kimi_pretokenizer.h"

#include "text/tokenizer/utf8.h"

namespace rill::text {
namespace {

constexpr size_t kNone = static_cast<size_t>(-1);
constexpr uint8_t kEnd = 0x80;  // class of the position past the end: belongs to no class

struct Atom {
  uint32_t cp;
  uint8_t cls;
  uint8_t len;
};

// One scan over a text; every alternative of the pattern is a method.
class Scan {
 public:
  Scan(std::string_view text, const UnicodeClassTable& table)
      : p_(reinterpret_cast<const unsigned char*>(text.data())), n_(text.size()), table_(table) {}

  Atom at(size_t pos) const {
    if (pos >= n_) return {0, kEnd, 0};
    if (p_[pos] < 0x80) return {p_[pos], table_(p_[pos]), 1};
    int len;
    const uint32_t cp = utf8_decode(p_ + pos, p_ + n_, &len);
    return {cp, cp == kInvalidCodePoint ? uint8_t{0} : table_(cp), static_cast<uint8_t>(len)};
  }

  // [^\r\n\p{L}\p{N}]
  static bool is_prefix(const Atom& a) {
    return !(a.cls & (kClassLetter | kClassNumber | kEnd)) && a.cp != '\r' && a.cp != '\n';
  }
  // [^\s\p{L}\p{N}]
  static bool is_punct(const Atom& a) {
    return !(a.cls & (kClassSpace | kClassLetter | kClassNumber | kEnd));
  }

  size_t run_of(size_t pos, uint8_t bit) const {
    for (Atom a = at(pos); a.cls & bit && !(a.cls & kEnd); a = at(pos)) pos += a.len;
    return pos;
  }

  // (?i:'s|'t|'re|'ve|'m|'ll|'d)? at pos. Unicode simple case folding adds only U+017F (long s) to the
  // ASCII pairs (probed against tiktoken: see tests/text/tokenizer).
  size_t contraction(size_t pos) const {
    if (pos + 1 >= n_ || p_[pos] != '\'') return pos;
    const unsigned char c = p_[pos + 1] | 0x20;
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return pos + 2;
    if (p_[pos + 1] == 0xC5 && pos + 2 < n_ && p_[pos + 2] == 0xBF) return pos + 3;
    if (pos + 2 >= n_) return pos;
    const unsigned char c2 = p_[pos + 2] | 0x20;
    if (((c == 'r' || c == 'v') && c2 == 'e') || (c == 'l' && c2 == 'l')) return pos + 3;
    return pos;
  }

  // U*L+C? from s: U* is greedy, so it gives back atoms until L+ can start; the first success in
  // backtracking order starts L+ at the latest possible atom.
  size_t upper_star_lower_plus(size_t s) const {
    size_t pos = s, last_both = kNone;
    for (Atom a = at(pos); a.cls & kClassUpper && !(a.cls & kEnd); a = at(pos)) {
      if (a.cls & kClassLower) last_both = pos;
      pos += a.len;
    }
    size_t lower_start;
    if (at(pos).cls & kClassLower && !(at(pos).cls & kEnd)) {
      lower_start = pos;
    } else if (last_both != kNone) {
      lower_start = last_both;
    } else {
      return kNone;
    }
    return contraction(run_of(lower_start, kClassLower));
  }

  // U+L*C? from s: both greedy, nothing to give back.
  size_t upper_plus_lower_star(size_t s) const {
    const size_t upper_end = run_of(s, kClassUpper);
    if (upper_end == s) return kNone;
    return contraction(run_of(upper_end, kClassLower));
  }

  size_t piece_end(size_t pos) const {
    const Atom a0 = at(pos);
    if (a0.cls & kClassHan) return run_of(pos + a0.len, kClassHan);

    const bool prefix = is_prefix(a0);
    size_t end;
    if (prefix && (end = upper_star_lower_plus(pos + a0.len)) != kNone) return end;
    if ((end = upper_star_lower_plus(pos)) != kNone) return end;
    if (prefix && (end = upper_plus_lower_star(pos + a0.len)) != kNone) return end;
    if ((end = upper_plus_lower_star(pos)) != kNone) return end;

    if (a0.cls & kClassNumber) {
      end = pos + a0.len;
      for (int i = 1; i < 3; ++i) {
        const Atom a = at(end);
        if (!(a.cls & kClassNumber) || a.cls & kEnd) break;
        end += a.len;
      }
      return end;
    }

    size_t punct_start = kNone;
    if (a0.cp == ' ' && is_punct(at(pos + 1))) {
      punct_start = pos + 1;
    } else if (is_punct(a0)) {
      punct_start = pos;
    }
    if (punct_start != kNone) {
      end = punct_start;
      for (Atom a = at(end); is_punct(a); a = at(end)) end += a.len;
      while (end < n_ && (p_[end] == '\r' || p_[end] == '\n')) ++end;
      return end;
    }

    // Whitespace: \s*[\r\n]+ ends after the run's last newline; else \s+(?!\S) leaves the run's last
    // character for the next piece when a non-space follows; else \s+.
    size_t last_newline = kNone, last_start = pos;
    end = pos;
    for (Atom a = at(end); a.cls & kClassSpace && !(a.cls & kEnd); a = at(end)) {
      if (a.cp == '\r' || a.cp == '\n') last_newline = end;
      last_start = end;
      end += a.len;
    }
    if (end == pos) return pos + a0.len;  // unreachable for the classes above; keeps progress guaranteed
    if (last_newline != kNone) return last_newline + 1;
    if (end == n_ || last_start == pos) return end;
    return last_start;
  }

 private:
  const unsigned char* p_;
  size_t n_;
  const UnicodeClassTable& table_;
};

}  // namespace

size_t KimiPreTokenizer::piece_end(std::string_view text, size_t pos) const {
  return Scan(text, *table_).piece_end(pos);
}

}  // namespace rill::text
