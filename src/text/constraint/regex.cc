#include "text/constraint/regex.h"

#include <algorithm>
#include <limits>
#include <optional>

#include <fmt/format.h>

namespace rill::text::constraint {

// ---- code point sets ----

namespace {
constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;
}  // namespace

CodePointSet CodePointSet::range(uint32_t lo, uint32_t hi) {
  CodePointSet s;
  s.add_range(lo, std::min(hi, kMaxCodePoint));
  return s;
}

void CodePointSet::add(const CodePointSet& other) {
  for (const auto& [lo, hi] : other.ranges_) add_range(lo, hi);
}

// Inserts [lo, hi] minus the surrogates, merging with overlapping or adjacent ranges.
void CodePointSet::add_range(uint32_t lo, uint32_t hi) {
  if (lo > hi) return;
  if (lo <= kSurrogateHi && hi >= kSurrogateLo) {
    if (lo < kSurrogateLo) add_range(lo, kSurrogateLo - 1);
    if (hi > kSurrogateHi) add_range(kSurrogateHi + 1, hi);
    return;
  }
  std::vector<std::pair<uint32_t, uint32_t>> out;
  bool placed = false;
  for (const auto& r : ranges_) {
    if (r.second + 1 < lo) {
      out.push_back(r);
    } else if (hi + 1 < r.first) {
      if (!placed) out.emplace_back(lo, hi), placed = true;
      out.push_back(r);
    } else {
      lo = std::min(lo, r.first);
      hi = std::max(hi, r.second);
    }
  }
  if (!placed) out.emplace_back(lo, hi);
  ranges_ = std::move(out);
}

CodePointSet CodePointSet::complement() const {
  CodePointSet out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges_) {
    if (lo > next) out.add_range(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.add_range(next, kMaxCodePoint);
  return out;
}

bool CodePointSet::contains(uint32_t c) const {
  return std::any_of(ranges_.begin(), ranges_.end(),
                     [c](const auto& r) { return r.first <= c && c <= r.second; });
}

// ---- lengths ----

namespace {
int32_t saturate(int64_t n) {
  return int32_t(std::min<int64_t>(n, std::numeric_limits<int32_t>::max()));
}
}  // namespace

int32_t Regex::min_length() const {
  switch (kind) {
    case Kind::Chars:
      return 1;
    case Kind::Seq: {
      int64_t n = 0;
      for (const Regex& c : children) n += c.min_length();
      return saturate(n);
    }
    case Kind::Alt: {
      int32_t n = std::numeric_limits<int32_t>::max();
      for (const Regex& c : children) n = std::min(n, c.min_length());
      return n;
    }
    case Kind::Repeat:
      return saturate(int64_t(children[0].min_length()) * min);
  }
  return 0;
}

int32_t Regex::max_length() const {
  switch (kind) {
    case Kind::Chars:
      return 1;
    case Kind::Seq: {
      int64_t n = 0;
      for (const Regex& c : children) {
        if (c.max_length() < 0) return -1;
        n += c.max_length();
      }
      return saturate(n);
    }
    case Kind::Alt: {
      int32_t n = 0;
      for (const Regex& c : children) {
        if (c.max_length() < 0) return -1;
        n = std::max(n, c.max_length());
      }
      return n;
    }
    case Kind::Repeat: {
      const int32_t child = children[0].max_length();
      if (child == 0 || max == 0) return 0;
      if (child < 0 || max < 0) return -1;
      return saturate(int64_t(child) * max);
    }
  }
  return 0;
}

// ---- parsing ----

namespace {

Regex chars(CodePointSet set) {
  Regex r;
  r.kind = Regex::Kind::Chars;
  r.chars = std::move(set);
  return r;
}
Regex node(Regex::Kind kind, std::vector<Regex> children) {
  if (children.size() == 1 && kind != Regex::Kind::Repeat) return std::move(children[0]);
  Regex r;
  r.kind = kind;
  r.children = std::move(children);
  return r;
}

CodePointSet digits() {
  return CodePointSet::range('0', '9');
}
CodePointSet word_chars() {
  CodePointSet s = CodePointSet::range('a', 'z');
  s.add(CodePointSet::range('A', 'Z'));
  s.add(digits());
  s.add(CodePointSet::of('_'));
  return s;
}
// ECMAScript WhiteSpace and LineTerminator.
CodePointSet space_chars() {
  CodePointSet s = CodePointSet::range(0x09, 0x0D);
  for (uint32_t c : {0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu})
    s.add(CodePointSet::of(c));
  s.add(CodePointSet::range(0x2000, 0x200A));
  return s;
}
// `.` without the s flag: anything but a line terminator.
CodePointSet dot_chars() {
  CodePointSet s = CodePointSet::of('\n');
  for (uint32_t c : {uint32_t('\r'), 0x2028u, 0x2029u}) s.add(CodePointSet::of(c));
  return s.complement();
}

bool is_syntax_char(uint32_t c) {
  return c < 0x80 && std::string_view("^$\\.*+?()[]{}|/-").find(char(c)) != std::string_view::npos;
}

int hex_value(uint32_t c) {
  if (c >= '0' && c <= '9') return int(c - '0');
  if (c >= 'a' && c <= 'f') return int(c - 'a' + 10);
  if (c >= 'A' && c <= 'F') return int(c - 'A' + 10);
  return -1;
}

// Code points of UTF-8 text; nullopt when it is not UTF-8.
std::optional<std::vector<uint32_t>> decode_utf8(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const uint8_t b0 = uint8_t(s[i]);
    int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + size_t(n) > s.size()) return std::nullopt;
    uint32_t c = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int k = 1; k < n; ++k) {
      const uint8_t b = uint8_t(s[i + size_t(k)]);
      if ((b & 0xC0) != 0x80) return std::nullopt;
      c = (c << 6) | (b & 0x3F);
    }
    out.push_back(c);
    i += size_t(n);
  }
  return out;
}

// Far past real patterns (the format patterns are much shorter, groups a few deep). Parsing recurses once
// per group and class ranges merge in time quadratic in their count, so both are bounded before any work.
constexpr size_t kMaxPatternLength = 4096;  // code points
constexpr int kMaxGroupDepth = 64;

class RegexParser {
 public:
  explicit RegexParser(std::vector<uint32_t> text) : s_(std::move(text)) {}

  // alternative ('|' alternative)*, each with an optional leading '^' and trailing '$'.
  Result<Regex> parse() {
    std::vector<Regex> alts;
    do {
      eat('^');
      RILL_ASSIGN_OR_RETURN(Regex seq, sequence(true));
      alts.push_back(std::move(seq));
    } while (eat('|'));
    if (!at_end()) return error("unmatched ')'");
    return node(Regex::Kind::Alt, std::move(alts));
  }

 private:
  bool at_end() const { return pos_ >= s_.size(); }
  uint32_t peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : 0; }
  bool eat(uint32_t c) {
    if (at_end() || s_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  Status error(std::string_view what) const { return invalid_argument("{} at {}", what, pos_); }
  Status unsupported(std::string_view what) const {
    return invalid_argument("{} at {} is not supported", what, pos_);
  }

  Result<Regex> alternation() {
    std::vector<Regex> alts;
    do {
      RILL_ASSIGN_OR_RETURN(Regex seq, sequence(false));
      alts.push_back(std::move(seq));
    } while (eat('|'));
    return node(Regex::Kind::Alt, std::move(alts));
  }

  Result<Regex> sequence(bool top) {
    std::vector<Regex> items;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (top && peek() == '$' && (pos_ + 1 == s_.size() || peek(1) == '|')) {
        ++pos_;
        break;
      }
      RILL_ASSIGN_OR_RETURN(Regex item, atom());
      RILL_ASSIGN_OR_RETURN(item, quantified(std::move(item)));
      items.push_back(std::move(item));
    }
    return node(Regex::Kind::Seq, std::move(items));
  }

  Result<Regex> atom() {
    const uint32_t c = s_[pos_];
    switch (c) {
      case '(':
        return group();
      case '[':
        ++pos_;
        return char_class();
      case '.':
        ++pos_;
        return chars(dot_chars());
      case '\\': {
        ++pos_;
        RILL_ASSIGN_OR_RETURN(CodePointSet set, escape(false));
        return chars(std::move(set));
      }
      case '^':
      case '$':
        return unsupported(fmt::format("anchor '{}' inside the pattern", char(c)));
      case '*':
      case '+':
      case '?':
      case '{':
        return error("nothing to repeat");
      case ']':
      case '}':
        return error(fmt::format("lone '{}'", char(c)));
      default:
        ++pos_;
        return chars(CodePointSet::of(c));
    }
  }

  Result<Regex> group() {
    if (++group_depth_ > kMaxGroupDepth)
      return error(fmt::format("groups nested deeper than {}", kMaxGroupDepth));
    ++pos_;  // '('
    if (eat('?')) {
      if (eat(':')) {
      } else if (peek() == '=' || peek() == '!') {
        return unsupported("lookahead");
      } else if (peek() == '<' && (peek(1) == '=' || peek(1) == '!')) {
        return unsupported("lookbehind");
      } else if (eat('<')) {
        while (!at_end() && peek() != '>') ++pos_;  // the name: it does not change the language
        if (!eat('>')) return error("unterminated group name");
      } else {
        return error("unknown group type (?");
      }
    }
    RILL_ASSIGN_OR_RETURN(Regex inner, alternation());
    if (!eat(')')) return error("missing ')'");
    --group_depth_;
    return inner;
  }

  // {n}, {n,}, {n,m} after '{'; nullopt (position unchanged) when the text is not one.
  std::optional<std::pair<int32_t, int32_t>> braces() {
    const size_t start = pos_;
    auto number = [&]() -> std::optional<int32_t> {
      int64_t n = 0;
      const size_t first = pos_;
      while (!at_end() && peek() >= '0' && peek() <= '9')
        n = std::min<int64_t>(n * 10 + (s_[pos_++] - '0'), 1 << 30);
      if (pos_ == first) return std::nullopt;
      return int32_t(n);
    };
    ++pos_;
    const auto lo = number();
    std::optional<int32_t> hi = lo;
    if (lo && eat(',')) hi = at_end() || peek() == '}' ? std::optional<int32_t>(-1) : number();
    if (!lo || !hi || !eat('}')) {
      pos_ = start;
      return std::nullopt;
    }
    return std::pair{*lo, *hi};
  }

  Result<Regex> quantified(Regex item) {
    int32_t min = 1, max = 1;
    if (at_end()) return item;
    const size_t at = pos_;
    switch (peek()) {
      case '*':
        ++pos_, min = 0, max = -1;
        break;
      case '+':
        ++pos_, min = 1, max = -1;
        break;
      case '?':
        ++pos_, min = 0, max = 1;
        break;
      case '{': {
        auto counts = braces();
        if (!counts) return error("'{' that does not start a {n,m} count");
        std::tie(min, max) = *counts;
        if (max >= 0 && max < min) return error("{n,m} with m < n");
        break;
      }
      default:
        return item;
    }
    eat('?');  // lazy: the same strings
    if (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?' || (peek() == '{' && braces())))
      return error("nothing to repeat");
    if (max < 0 && item.min_length() == 0) {
      pos_ = at;
      return unsupported("an unbounded repeat of something that can match the empty string");
    }
    Regex r;
    r.kind = Regex::Kind::Repeat;
    r.min = min;
    r.max = max;
    r.children.push_back(std::move(item));
    return r;
  }

  Result<uint32_t> hex(int n_digits) {
    uint32_t v = 0;
    for (int i = 0; i < n_digits; ++i) {
      const int h = hex_value(peek());
      if (at_end() || h < 0) return error("bad hex escape");
      v = v * 16 + uint32_t(h);
      ++pos_;
    }
    return v;
  }

  // After '\\'. In a class, \b is a backspace; outside, a word boundary.
  Result<CodePointSet> escape(bool in_class) {
    if (at_end()) return error("pattern ends with '\\'");
    const uint32_t c = s_[pos_++];
    switch (c) {
      case 'd':
        return digits();
      case 'D':
        return digits().complement();
      case 'w':
        return word_chars();
      case 'W':
        return word_chars().complement();
      case 's':
        return space_chars();
      case 'S':
        return space_chars().complement();
      case 't':
        return CodePointSet::of('\t');
      case 'n':
        return CodePointSet::of('\n');
      case 'v':
        return CodePointSet::of('\v');
      case 'f':
        return CodePointSet::of('\f');
      case 'r':
        return CodePointSet::of('\r');
      case 'b':
        if (in_class) return CodePointSet::of('\b');
        --pos_;
        return unsupported("word boundary \\b");
      case 'B':
        --pos_;
        return unsupported("word boundary \\B");
      case '0':
        if (peek() >= '0' && peek() <= '9') return unsupported("octal escape");
        return CodePointSet::of(0);
      case 'x': {
        RILL_ASSIGN_OR_RETURN(uint32_t v, hex(2));
        return CodePointSet::of(v);
      }
      case 'u':
        return unicode_escape();
      case 'c':
        --pos_;
        return unsupported("control escape \\c");
      case 'k':
        --pos_;
        return unsupported("backreference \\k");
      case 'p':
      case 'P':
        --pos_;
        return unsupported("Unicode property escape");
      default:
        if (c >= '1' && c <= '9') {
          --pos_;
          return unsupported("backreference");
        }
        if (is_syntax_char(c)) return CodePointSet::of(c);
        --pos_;
        return error(fmt::format("unknown escape '\\{}'", c < 0x80 ? std::string(1, char(c)) : "?"));
    }
  }

  // After "\u": HHHH (a high surrogate joins the \uHHHH low one after it) or {H...}.
  Result<CodePointSet> unicode_escape() {
    if (eat('{')) {
      uint32_t v = 0;
      const size_t first = pos_;
      while (!at_end() && hex_value(peek()) >= 0)
        v = std::min<uint32_t>(v * 16 + uint32_t(hex_value(s_[pos_++])), 0x110000);
      if (pos_ == first || !eat('}') || v > kMaxCodePoint) return error("bad \\u{...} escape");
      if (v >= kSurrogateLo && v <= kSurrogateHi) return error("lone surrogate escape");
      return CodePointSet::of(v);
    }
    RILL_ASSIGN_OR_RETURN(uint32_t v, hex(4));
    if (v >= 0xD800 && v <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
      const size_t save = pos_;
      pos_ += 2;
      auto low = hex(4);
      if (low.ok() && *low >= 0xDC00 && *low <= 0xDFFF)
        return CodePointSet::of(0x10000 + ((v - 0xD800) << 10) + (*low - 0xDC00));
      pos_ = save;
    }
    if (v >= kSurrogateLo && v <= kSurrogateHi) return error("lone surrogate escape");
    return CodePointSet::of(v);
  }

  // One class member: a character (single) or a class escape like \d.
  struct ClassAtom {
    CodePointSet set;
    std::optional<uint32_t> single;
  };
  Result<ClassAtom> class_atom() {
    if (eat('\\')) {
      const uint32_t letter = peek();
      RILL_ASSIGN_OR_RETURN(CodePointSet set, escape(true));
      const bool is_class = std::string_view("dDwWsS").find(char(letter)) != std::string_view::npos;
      if (is_class) return ClassAtom{std::move(set), std::nullopt};
      const uint32_t c = set.ranges()[0].first;
      return ClassAtom{std::move(set), c};
    }
    const uint32_t c = s_[pos_++];
    return ClassAtom{CodePointSet::of(c), c};
  }

  // After '['.
  Result<Regex> char_class() {
    const bool negated = eat('^');
    CodePointSet set;
    for (;;) {
      if (at_end()) return error("unterminated character class");
      if (eat(']')) break;
      RILL_ASSIGN_OR_RETURN(ClassAtom lo, class_atom());
      if (peek() == '-' && pos_ + 1 < s_.size() && peek(1) != ']') {
        ++pos_;
        if (at_end()) return error("unterminated character class");
        RILL_ASSIGN_OR_RETURN(ClassAtom hi, class_atom());
        if (!lo.single || !hi.single) return error("a class escape as the end of a range");
        if (*lo.single > *hi.single) return error("class range out of order");
        set.add(CodePointSet::range(*lo.single, *hi.single));
      } else {
        set.add(lo.set);
      }
    }
    if (negated) set = set.complement();
    // A class of no character would leave the grammar a dead end (the matcher offers what it cannot finish).
    if (set.empty()) return error("a character class that matches nothing");
    return chars(std::move(set));
  }

  std::vector<uint32_t> s_;
  size_t pos_ = 0;
  int group_depth_ = 0;
};

}  // namespace

Result<Regex> parse_regex(std::string_view pattern) {
  auto text = decode_utf8(pattern);
  if (!text) return invalid_argument("the pattern is not valid UTF-8");
  if (text->size() > kMaxPatternLength)
    return invalid_argument("a pattern of {} characters exceeds the limit of {}", text->size(),
                            kMaxPatternLength);
  return RegexParser(std::move(*text)).parse();
}

// ---- lengths ----

namespace {

bool fixed(const Regex& r) {
  return r.min_length() == r.max_length();
}

bool within(const Regex& r, int32_t min_chars, int32_t max_chars) {
  return r.min_length() >= min_chars &&
         (max_chars < 0 || (r.max_length() >= 0 && r.max_length() <= max_chars));
}

// One top-level alternative cut to the bounds; nullopt when none of its strings fit.
Result<std::optional<Regex>> fit_alternative(const Regex& alt, int32_t min_chars, int32_t max_chars) {
  if (within(alt, min_chars, max_chars)) return std::optional<Regex>(alt);
  if (max_chars >= 0 && alt.min_length() > max_chars) return std::optional<Regex>();
  if (alt.max_length() >= 0 && alt.max_length() < min_chars) return std::optional<Regex>();
  Regex seq;
  if (alt.kind == Regex::Kind::Seq) {
    seq = alt;
  } else {
    seq.children.push_back(alt);  // a Seq of one
  }
  int64_t fixed_chars = 0;
  Regex* repeat = nullptr;
  for (Regex& part : seq.children) {
    if (fixed(part)) {
      fixed_chars += part.min_length();
    } else if (repeat == nullptr && part.kind == Regex::Kind::Repeat && fixed(part.children[0]) &&
               part.children[0].min_length() > 0) {
      repeat = &part;
    } else {
      return invalid_argument(
          "minLength / maxLength together with this pattern are not supported (only a pattern whose variable "
          "part is one repeat of a fixed-length piece can be cut to a length)");
    }
  }
  if (repeat == nullptr)
    return std::optional<Regex>();  // all fixed: inside the bounds or outside, seen above
  const int64_t unit = repeat->children[0].min_length();
  // fixed + unit * count in [min_chars, max_chars]
  const int64_t lo =
      std::max<int64_t>(repeat->min, (std::max<int64_t>(min_chars - fixed_chars, 0) + unit - 1) / unit);
  int64_t hi = repeat->max < 0 ? -1 : repeat->max;
  if (max_chars >= 0) {
    const int64_t cap = (max_chars - fixed_chars) / unit;
    hi = hi < 0 ? cap : std::min(hi, cap);
  }
  if (hi >= 0 && lo > hi) return std::optional<Regex>();
  repeat->min = saturate(lo);
  repeat->max = hi < 0 ? -1 : saturate(hi);
  return std::optional<Regex>(std::move(seq));
}

}  // namespace

Result<Regex> fit_length(const Regex& regex, int32_t min_chars, int32_t max_chars) {
  if (within(regex, min_chars, max_chars)) return regex;
  const std::vector<Regex> alts = regex.kind == Regex::Kind::Alt ? regex.children : std::vector<Regex>{regex};
  std::vector<Regex> kept;
  for (const Regex& alt : alts) {
    RILL_ASSIGN_OR_RETURN(std::optional<Regex> fitted, fit_alternative(alt, min_chars, max_chars));
    if (fitted) kept.push_back(std::move(*fitted));
  }
  if (kept.empty())
    return invalid_argument("no string of the pattern has a length allowed by minLength / maxLength");
  return node(Regex::Kind::Alt, std::move(kept));
}

// ---- grammar ----

namespace {

std::vector<uint8_t> utf8_bytes(uint32_t c) {
  if (c < 0x800) return {uint8_t(0xC0 | (c >> 6)), uint8_t(0x80 | (c & 0x3F))};
  if (c < 0x10000)
    return {uint8_t(0xE0 | (c >> 12)), uint8_t(0x80 | ((c >> 6) & 0x3F)), uint8_t(0x80 | (c & 0x3F))};
  return {uint8_t(0xF0 | (c >> 18)), uint8_t(0x80 | ((c >> 12) & 0x3F)), uint8_t(0x80 | ((c >> 6) & 0x3F)),
          uint8_t(0x80 | (c & 0x3F))};
}

class PatternEmitter {
 public:
  // json_spelling: characters as a JSON string spells them (escapes included); else as plain UTF-8 text.
  explicit PatternEmitter(GrammarBuilder& b, bool json_spelling = true) : b_(b), json_spelling_(json_spelling) {}

  NodeId emit(const Regex& r) {
    switch (r.kind) {
      case Regex::Kind::Chars:
        return character(r.chars);
      case Regex::Kind::Seq:
      case Regex::Kind::Alt: {
        std::vector<NodeId> children;
        for (const Regex& c : r.children) children.push_back(emit(c));
        return r.kind == Regex::Kind::Seq ? b_.seq(std::move(children)) : b_.alt(std::move(children));
      }
      case Regex::Kind::Repeat:
        return b_.repeat(emit(r.children[0]), r.min, r.max);
    }
    return b_.alt({});
  }

 private:
  // One JSON spelling of each character of the set (see regex.h), or its UTF-8 bytes as plain text.
  NodeId character(const CodePointSet& set) {
    std::vector<NodeId> alts;
    if (!json_spelling_) {
      std::bitset<256> ascii;
      for (uint32_t c = 0; c < 0x80; ++c)
        if (set.contains(c)) ascii.set(c);
      if (ascii.any()) alts.push_back(b_.byte_class(ascii));
      for (const auto& [lo, hi] : set.ranges())
        if (hi >= 0x80) add_utf8_ranges(std::max<uint32_t>(lo, 0x80), hi, alts);
      return b_.alt(std::move(alts));
    }
    // Literal ASCII (printable, not '"' or '\\') and everything from U+0080 on.
    std::bitset<256> ascii;
    for (uint32_t c = 0x20; c < 0x80; ++c)
      if (c != '"' && c != '\\' && set.contains(c)) ascii.set(c);
    CodePointSet wide;
    for (const auto& [lo, hi] : set.ranges())
      if (hi >= 0x80) wide.add(CodePointSet::range(std::max<uint32_t>(lo, 0x80), hi));
    if (wide.ranges() == CodePointSet::range(0x80, kMaxCodePoint).ranges()) {
      std::string excluded;
      for (int c = 0x20; c < 0x80; ++c)
        if (!ascii.test(size_t(c))) excluded.push_back(char(c));
      alts.push_back(b_.utf8_char(excluded));
    } else {
      if (ascii.any()) alts.push_back(b_.byte_class(ascii));
      for (const auto& [lo, hi] : wide.ranges()) add_utf8_ranges(lo, hi, alts);
    }
    // Escapes: \" \\ \b \f \n \r \t, and \u00XX for the other controls.
    std::bitset<256> short_escapes;
    for (auto [c, letter] : {std::pair{uint32_t('"'), '"'},
                             {'\\', '\\'},
                             {'\b', 'b'},
                             {'\f', 'f'},
                             {'\n', 'n'},
                             {'\r', 'r'},
                             {'\t', 't'}})
      if (set.contains(c)) short_escapes.set(uint8_t(letter));
    std::vector<NodeId> escapes;
    if (short_escapes.any()) escapes.push_back(b_.byte_class(short_escapes));
    std::vector<NodeId> hex_escapes;
    for (uint32_t high = 0; high < 2; ++high) {
      std::bitset<256> low;
      for (uint32_t c = high * 16; c < high * 16 + 16; ++c) {
        const bool short_form = c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t';
        if (!short_form && set.contains(c)) low.set(uint8_t(fmt::format("{:x}", c % 16)[0]));
      }
      if (low.any()) hex_escapes.push_back(b_.seq({b_.bytes(std::to_string(high)), b_.byte_class(low)}));
    }
    if (!hex_escapes.empty()) escapes.push_back(b_.seq({b_.bytes("u00"), b_.alt(std::move(hex_escapes))}));
    if (!escapes.empty()) alts.push_back(b_.seq({b_.bytes("\\"), b_.alt(std::move(escapes))}));
    return b_.alt(std::move(alts));
  }

  // The UTF-8 encodings of [lo, hi] (lo >= 0x80), split where the encoded length changes.
  void add_utf8_ranges(uint32_t lo, uint32_t hi, std::vector<NodeId>& alts) {
    for (auto [first, last] : {std::pair{0x80u, 0x7FFu}, {0x800u, 0xFFFFu}, {0x10000u, kMaxCodePoint}}) {
      const uint32_t a = std::max(lo, first), z = std::min(hi, last);
      if (a <= z) alts.push_back(byte_ranges(utf8_bytes(a), utf8_bytes(z), 0));
    }
  }

  // Byte strings of one length between lo and hi (the digit-range construction, over continuation bytes).
  NodeId byte_ranges(std::vector<uint8_t> lo, std::vector<uint8_t> hi, size_t i) {
    const size_t n = lo.size();
    if (i + 1 == n) return b_.byte_range(lo[i], hi[i]);
    if (lo[i] == hi[i]) return b_.seq({b_.byte_range(lo[i], lo[i]), byte_ranges(lo, hi, i + 1)});
    const bool lo_full = std::all_of(lo.begin() + long(i) + 1, lo.end(), [](uint8_t c) { return c == 0x80; });
    const bool hi_full = std::all_of(hi.begin() + long(i) + 1, hi.end(), [](uint8_t c) { return c == 0xBF; });
    std::vector<NodeId> alts;
    if (!lo_full) {
      std::vector<uint8_t> top = lo;
      std::fill(top.begin() + long(i) + 1, top.end(), 0xBF);
      alts.push_back(b_.seq({b_.byte_range(lo[i], lo[i]), byte_ranges(lo, top, i + 1)}));
    }
    const int first = lo_full ? lo[i] : lo[i] + 1, last = hi_full ? hi[i] : hi[i] - 1;
    if (first <= last) {
      const NodeId continuation =
          b_.repeat(b_.byte_range(0x80, 0xBF), int32_t(n - i - 1), int32_t(n - i - 1));
      alts.push_back(b_.seq({b_.byte_range(uint8_t(first), uint8_t(last)), continuation}));
    }
    if (!hi_full) {
      std::vector<uint8_t> bottom = hi;
      std::fill(bottom.begin() + long(i) + 1, bottom.end(), 0x80);
      alts.push_back(b_.seq({b_.byte_range(hi[i], hi[i]), byte_ranges(bottom, hi, i + 1)}));
    }
    return b_.alt(std::move(alts));
  }

  GrammarBuilder& b_;
  bool json_spelling_;
};

}  // namespace

NodeId json_string_node(GrammarBuilder& b, const Regex& regex) {
  return b.seq({b.bytes("\""), PatternEmitter(b).emit(regex), b.bytes("\"")});
}

NodeId text_node(GrammarBuilder& b, const Regex& regex) {
  return PatternEmitter(b, /*json_spelling=*/false).emit(regex);
}

}  // namespace rill::text::constraint
