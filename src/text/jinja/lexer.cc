#include "text/jinja/lexer.h"

#include <algorithm>
#include <cstdlib>

#include "text/jinja/error.h"
#include "text/jinja/unicode.h"

namespace rill::text::jinja {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

// jinja2 splits on \r\n, \r and \n, drops one trailing newline (keep_trailing_newline=False) and rejoins
// with \n, so every later rule sees only \n.
std::string normalize_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
      out.push_back('\n');
    } else {
      out.push_back(s[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Length of the whitespace run (Python's \s, Unicode-aware) starting at pos.
size_t space_run(std::string_view s, size_t pos) {
  size_t i = pos;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    const std::u32string cp = unicode::decode(s.substr(i, n));
    if (cp.empty() || !unicode::is_space(cp[0])) break;
    i += n;
  }
  return i - pos;
}

std::string rstrip_space(std::string_view s) {
  const std::u32string cps = unicode::decode(s);
  size_t e = cps.size();
  while (e > 0 && unicode::is_space(cps[e - 1])) --e;
  return unicode::encode(std::u32string_view(cps).substr(0, e));
}

// Python's "unicode-escape" codec, applied (as jinja2 does) after non-ASCII characters were turned into
// \x/\u/\U escapes by "backslashreplace"; both steps are reproduced so `'\é'` decodes as Python does.
std::string unescape_string(std::string_view raw) {
  std::string ascii;
  for (char32_t cp : unicode::decode(raw)) {
    if (cp < 0x80)
      ascii.push_back(static_cast<char>(cp));
    else if (cp < 0x100)
      ascii += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
    else if (cp < 0x10000)
      ascii += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
    else
      ascii += fmt::format("\\U{:08x}", static_cast<unsigned>(cp));
  }
  std::string out;
  for (size_t i = 0; i < ascii.size(); ++i) {
    if (ascii[i] != '\\' || i + 1 >= ascii.size()) {
      out.push_back(ascii[i]);
      continue;
    }
    const char c = ascii[++i];
    auto hex = [&](size_t n) {
      const std::string digits = ascii.substr(i + 1, n);
      if (digits.size() != n || digits.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
        fail("truncated \\{}{} escape", c, std::string(n, 'X'));
      }
      i += n;
      const auto cp = static_cast<char32_t>(std::strtoul(digits.c_str(), nullptr, 16));
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) fail("illegal Unicode character in string literal");
      unicode::append_utf8(out, cp);
    };
    // Python's one-character escapes: \\ \' \" \a \b \f \n \r \t \v.
    constexpr std::string_view kEscaped = "\\'\"abfnrtv", kMeaning = "\\'\"\a\b\f\n\r\t\v";
    if (const size_t e = kEscaped.find(c); e != std::string_view::npos) {
      out.push_back(kMeaning[e]);
      continue;
    }
    switch (c) {
      case '\n':
        break;  // line continuation
      case 'x':
        hex(2);
        break;
      case 'u':
        hex(4);
        break;
      case 'U':
        hex(8);
        break;
      case 'N':
        fail("\\N{{...}} escapes in string literals are not supported");
      default:
        if (c >= '0' && c <= '7') {
          unsigned v = c - '0';
          for (int k = 0; k < 2 && i + 1 < ascii.size() && ascii[i + 1] >= '0' && ascii[i + 1] <= '7'; ++k) {
            v = v * 8 + (ascii[++i] - '0');
          }
          unicode::append_utf8(out, v);
        } else {
          out.push_back('\\');  // unknown escapes stay as written
          out.push_back(c);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_root();
    out_.push_back(Token{TokenType::Eof, "", 0, 0, line_at(src_.size())});
    return std::move(out_);
  }

 private:
  enum class Tag { Variable, Block, Comment };

  int line_at(size_t pos) const {
    return static_cast<int>(std::upper_bound(line_starts_.begin(), line_starts_.end(), pos) -
                            line_starts_.begin());
  }

  [[noreturn]] void fail_at(size_t pos, std::string message) const {
    throw Error{std::move(message), line_at(pos)};
  }

  void emit(TokenType type, std::string text, size_t pos) {
    out_.push_back(Token{type, std::move(text), 0, 0, line_at(pos)});
  }

  // The text before a tag, after the tag's `-` (strip all whitespace) or lstrip_blocks (strip the
  // indentation of a line that holds only the tag) rule.
  void emit_data_before_tag(std::string text, size_t data_pos, char sign, bool lstrip) {
    if (sign == '-') {
      text = rstrip_space(text);
    } else if (sign != '+' && lstrip) {
      const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size() &&
          space_run(text, l_pos) == text.size() - l_pos) {
        text.resize(l_pos);
      }
    }
    if (!text.empty()) emit(TokenType::Data, std::move(text), data_pos);
  }

  void lex_root() {
    size_t q = pos_;
    while (true) {
      q = src_.find('{', q);
      if (q == std::string::npos || q + 1 >= src_.size()) {
        emit(TokenType::Data, src_.substr(pos_), pos_);
        pos_ = src_.size();
        return;
      }
      const char c = src_[q + 1];
      if (c == '{' || c == '%' || c == '#') break;
      ++q;
    }
    const char c = src_[q + 1];
    const char sign = (q + 2 < src_.size() && (src_[q + 2] == '-' || src_[q + 2] == '+')) ? src_[q + 2] : 0;
    const Tag tag = c == '{' ? Tag::Variable : c == '%' ? Tag::Block : Tag::Comment;
    std::string text = src_.substr(pos_, q - pos_);
    const size_t data_pos = pos_;
    if (tag == Tag::Block && try_raw(q, text, data_pos, sign)) return;
    emit_data_before_tag(std::move(text), data_pos, sign, tag != Tag::Variable);
    pos_ = q + 2 + (sign ? 1 : 0);
    if (tag == Tag::Comment) {
      lex_comment(q);
      return;
    }
    emit(tag == Tag::Variable ? TokenType::VariableBegin : TokenType::BlockBegin, "", q);
    lex_tag(tag, q);
  }

  // `{% raw %}`: the begin tag does not trim the following newline; the body is data up to `{% endraw %}`.
  bool try_raw(size_t q, std::string& text, size_t data_pos, char sign) {
    size_t i = q + 2 + (sign ? 1 : 0);
    i += space_run(src_, i);
    if (src_.compare(i, 3, "raw") != 0) return false;
    i += 3;
    i += space_run(src_, i);
    size_t body = 0;
    if (src_.compare(i, 3, "-%}") == 0) {
      body = i + 3 + space_run(src_, i + 3);
    } else if (src_.compare(i, 2, "%}") == 0) {
      body = i + 2;
    } else {
      return false;
    }
    emit_data_before_tag(std::move(text), data_pos, sign, true);
    for (size_t s = src_.find("{%", body); s != std::string::npos; s = src_.find("{%", s + 1)) {
      const char end_sign =
          (s + 2 < src_.size() && (src_[s + 2] == '-' || src_[s + 2] == '+')) ? src_[s + 2] : 0;
      size_t j = s + 2 + (end_sign ? 1 : 0);
      j += space_run(src_, j);
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      j += space_run(src_, j);
      const size_t end = match_block_end(j);
      if (end == 0) continue;
      emit_data_before_tag(src_.substr(body, s - body), body, end_sign, true);
      finish_tag(end);
      return true;
    }
    fail_at(q, "Missing end of raw directive");
  }

  void lex_comment(size_t start) {
    const size_t q = src_.find("#}", pos_);
    if (q == std::string::npos) fail_at(start, "Missing end of comment tag");
    const bool signed_end = q > pos_ && (src_[q - 1] == '-' || src_[q - 1] == '+');
    size_t end = q + 2;
    if (signed_end && src_[q - 1] == '-') {
      end += space_run(src_, end);
    } else if (!signed_end && end < src_.size() && src_[end] == '\n') {
      ++end;  // trim_blocks
    }
    finish_tag(end);
  }

  // Matches a block end at i (`+%}`, `-%}` + whitespace, `%}` + one newline under trim_blocks); returns
  // the position after it, or 0.
  size_t match_block_end(size_t i) const {
    if (src_.compare(i, 3, "+%}") == 0) return i + 3;
    if (src_.compare(i, 3, "-%}") == 0) return i + 3 + space_run(src_, i + 3);
    if (src_.compare(i, 2, "%}") == 0) return i + 2 + (i + 2 < src_.size() && src_[i + 2] == '\n');
    return 0;
  }

  size_t match_variable_end(size_t i) const {
    if (src_.compare(i, 3, "-}}") == 0) return i + 3 + space_run(src_, i + 3);
    if (src_.compare(i, 2, "}}") == 0) return i + 2;
    return 0;
  }

  void finish_tag(size_t end) {
    line_starting_ = end > 0 && src_[end - 1] == '\n';
    pos_ = end;
  }

  void lex_tag(Tag tag, size_t tag_pos) {
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size()) fail_at(tag_pos, "unexpected end of template: unclosed tag");
      if (balance.empty()) {
        const size_t end = tag == Tag::Block ? match_block_end(pos_) : match_variable_end(pos_);
        if (end) {
          emit(tag == Tag::Block ? TokenType::BlockEnd : TokenType::VariableEnd, "", pos_);
          finish_tag(end);
          return;
        }
      }
      if (const size_t ws = space_run(src_, pos_)) {
        pos_ += ws;
        continue;
      }
      lex_token(balance);
    }
  }

  void lex_token(std::vector<char>& balance) {
    const char c = src_[pos_];
    if (lex_number()) return;
    if (is_name_start(c)) {
      size_t e = pos_;
      while (e < src_.size() && is_name_char(src_[e])) ++e;
      emit(TokenType::Name, src_.substr(pos_, e - pos_), pos_);
      pos_ = e;
      return;
    }
    if (c == '\'' || c == '"') {
      lex_string();
      return;
    }
    lex_operator(balance);
  }

  // float_re: digits with a fraction and/or exponent, not right after a '.'.
  size_t float_length(size_t i) const {
    if (i > 0 && src_[i - 1] == '.') return 0;
    auto digits = [&](size_t k) {  // (\d+_)*\d+
      size_t e = k;
      while (e < src_.size() &&
             (is_digit(src_[e]) || (src_[e] == '_' && e > k && e + 1 < src_.size() && is_digit(src_[e + 1]))))
        ++e;
      return e;
    };
    size_t e = digits(i);
    if (e == i) return 0;
    bool has_fraction = false;
    if (e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      e = digits(e + 1);
      has_fraction = true;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t k = e + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      const size_t end = digits(k);
      if (end > k) return end - i;
    }
    return has_fraction ? e - i : 0;
  }

  bool lex_number() {
    if (!is_digit(src_[pos_])) return false;
    std::string text;
    if (const size_t n = float_length(pos_)) {
      for (char ch : src_.substr(pos_, n))
        if (ch != '_') text.push_back(ch);
      Token t{TokenType::Float, text, 0, std::strtod(text.c_str(), nullptr), line_at(pos_)};
      out_.push_back(std::move(t));
      pos_ += n;
      return true;
    }
    int base = 10;
    size_t e = pos_;
    if (src_[pos_] == '0' && pos_ + 1 < src_.size() &&
        std::string_view("bBoOxX").find(src_[pos_ + 1]) != std::string_view::npos) {
      const char p = static_cast<char>(src_[pos_ + 1] | 0x20);
      base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
      e = pos_ + 2;
    }
    auto is_base_digit = [&](char ch) {
      const int d = is_digit(ch)                                 ? ch - '0'
                    : ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f') ? (ch | 0x20) - 'a' + 10
                                                                 : 99;
      return d < base;
    };
    const size_t digits_start = e;
    while (e < src_.size() && (is_base_digit(src_[e]) ||
                               (src_[e] == '_' && e + 1 < src_.size() && is_base_digit(src_[e + 1])))) {
      if (base == 10 && src_[pos_] == '0' && src_[e] != '0' && src_[e] != '_') break;  // 0(_?0)*
      ++e;
    }
    if (e == digits_start) fail_at(pos_, fmt::format("unexpected char '{}'", src_[pos_]));
    for (char ch : src_.substr(digits_start, e - digits_start))
      if (ch != '_') text.push_back(ch);
    errno = 0;
    const unsigned long long v = std::strtoull(text.c_str(), nullptr, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) {
      fail_at(pos_, "integer literal exceeds 64 bits");
    }
    Token t{TokenType::Integer, text, static_cast<int64_t>(v), 0, line_at(pos_)};
    out_.push_back(std::move(t));
    pos_ = e;
    return true;
  }

  void lex_string() {
    const char quote = src_[pos_];
    size_t e = pos_ + 1;
    while (e < src_.size() && src_[e] != quote) e += src_[e] == '\\' ? 2 : 1;
    if (e >= src_.size()) fail_at(pos_, fmt::format("unexpected char '{}'", quote));
    try {
      emit(TokenType::String, unescape_string(src_.substr(pos_ + 1, e - pos_ - 1)), pos_);
    } catch (Error& err) {
      err.line = line_at(pos_);
      throw;
    }
    pos_ = e + 1;
  }

  void lex_operator(std::vector<char>& balance) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (src_.compare(pos_, 2, op) == 0) {
        emit(TokenType::Operator, std::string(op), pos_);
        pos_ += 2;
        return;
      }
    }
    const char c = src_[pos_];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      fail_at(pos_, fmt::format("unexpected char '{}' in tag", c));
    }
    if (c == '(' || c == '[' || c == '{') balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail_at(pos_, fmt::format("unexpected '{}'", c));
      if (balance.back() != c)
        fail_at(pos_, fmt::format("unexpected '{}', expected '{}'", c, balance.back()));
      balance.pop_back();
    }
    emit(TokenType::Operator, std::string(1, c), pos_);
    ++pos_;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  size_t pos_ = 0;
  bool line_starting_ = true;  // the previous tag's end consumed a newline (lstrip_blocks' line-start test)
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  if (!unicode::is_valid_utf8(source)) throw Error{"template is not valid UTF-8", 1};
  return Lexer(source).run();
}

}  // namespace rill::text::jinja
