#include "text/jinja/py_format.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "text/jinja/error.h"
#include "text/jinja/unicode.h"

namespace rill::text::jinja {
namespace {

std::string_view strip_space(std::string_view s) {
  const std::u32string cps = unicode::decode(s);
  size_t b = 0, e = cps.size();
  while (b < e && unicode::is_space(cps[b])) ++b;
  while (e > b && unicode::is_space(cps[e - 1])) --e;
  // Convert code-point bounds back to byte offsets.
  size_t byte_b = 0, byte_e = 0, i = 0;
  for (size_t pos = 0; pos <= s.size(); ++pos) {
    if (pos == s.size() || (static_cast<unsigned char>(s[pos]) & 0xC0) != 0x80) {
      if (i == b) byte_b = pos;
      if (i == e) byte_e = pos;
      ++i;
    }
  }
  return s.substr(byte_b, byte_e - byte_b);
}

// Removes single underscores between digits; fails (nullopt) on any other underscore, as Python does.
std::optional<std::string> strip_underscores(std::string_view s, bool (*is_digit)(char)) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '_') {
      out.push_back(s[i]);
      continue;
    }
    if (i == 0 || i + 1 >= s.size() || !is_digit(s[i - 1]) || !is_digit(s[i + 1])) return std::nullopt;
  }
  return out;
}

int digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'z') return c - 'a' + 10;
  if (c >= 'A' && c <= 'Z') return c - 'A' + 10;
  return 99;
}

void append_escaped_cp(std::string& out, char32_t cp) {
  if (cp < 0x100) {
    out += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
  } else if (cp < 0x10000) {
    out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
  } else {
    out += fmt::format("\\U{:08x}", static_cast<unsigned>(cp));
  }
}

struct Spec {
  char fill = ' ';
  char align = 0;  // '<' '>' '^' '=' or 0 for the type's default
  char sign = '-';
  bool alternate = false;
  bool zero = false;
  int width = 0;
  int precision = -1;
  char type = 0;
};

Spec parse_brace_spec(std::string_view s) {
  Spec spec;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (s.size() >= 2 && is_align(s[1])) {
    spec.fill = s[0];
    spec.align = s[1];
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    spec.align = s[0];
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) spec.sign = s[i++];
  if (i < s.size() && s[i] == '#') spec.alternate = true, ++i;
  if (i < s.size() && s[i] == '0') spec.zero = true, ++i;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') spec.width = spec.width * 10 + (s[i++] - '0');
  if (i < s.size() && s[i] == '.') {
    spec.precision = 0;
    for (++i; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i)
      spec.precision = spec.precision * 10 + (s[i] - '0');
  }
  if (i < s.size()) spec.type = s[i++];
  if (i != s.size()) fail("format spec '{}' is not supported", s);
  return spec;
}

std::string pad(std::string body, const Spec& spec, char default_align) {
  const size_t len = unicode::count_codepoints(body);
  if (spec.width <= 0 || len >= static_cast<size_t>(spec.width)) return body;
  const size_t n = spec.width - len;
  char align = spec.align ? spec.align : default_align;
  char fill = spec.fill;
  if (spec.zero && !spec.align && default_align == '>') align = '=', fill = '0';
  if (align == '<') return body + std::string(n, fill);
  if (align == '^') return std::string(n / 2, fill) + body + std::string(n - n / 2, fill);
  if (align == '=' && !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) {
    return body.substr(0, 1) + std::string(n, fill) + body.substr(1);
  }
  return std::string(n, fill) + body;
}

std::string with_sign(std::string digits, bool negative, char sign) {
  if (negative) return "-" + digits;
  if (sign == '+') return "+" + digits;
  if (sign == ' ') return " " + digits;
  return digits;
}

std::string format_int(int64_t v, char type, const Spec& spec) {
  const bool neg = v < 0;
  const uint64_t mag = neg ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  std::string digits;
  switch (type) {
    case 'x':
      digits = fmt::format("{}{:x}", spec.alternate ? "0x" : "", mag);
      break;
    case 'X':
      digits = fmt::format("{}{:X}", spec.alternate ? "0X" : "", mag);
      break;
    case 'o':
      digits = fmt::format("{}{:o}", spec.alternate ? "0o" : "", mag);
      break;
    case 'b':
      digits = fmt::format("{}{:b}", spec.alternate ? "0b" : "", mag);
      break;
    default:
      digits = std::to_string(mag);
      break;
  }
  return with_sign(digits, neg, spec.sign);
}

std::string format_double(double d, char type, int precision, char sign) {
  if (type == '%') return format_double(d * 100, 'f', precision, sign) + "%";
  const bool neg = std::signbit(d) && !std::isnan(d);
  char cfmt[8] = {'%', '.', '*', type, 0};
  char buf[512];
  std::snprintf(buf, sizeof buf, cfmt, precision < 0 ? 6 : precision, std::fabs(d));
  return with_sign(buf, neg, sign);
}

std::string format_number(const Value& v, const Spec& spec) {
  const char t = spec.type;
  if (v.is_integral() && (t == 0 || t == 'd' || t == 'x' || t == 'X' || t == 'o' || t == 'b')) {
    return format_int(v.as_int(), t, spec);
  }
  if (t == 'f' || t == 'F' || t == 'e' || t == 'E' || t == 'g' || t == 'G' || t == '%') {
    return format_double(v.as_double(), t, spec.precision, spec.sign);
  }
  if (t == 0 && v.is_float() && spec.precision < 0) {
    const double d = v.as_double();
    return with_sign(float_repr(std::fabs(d)), std::signbit(d) && !std::isnan(d), spec.sign);
  }
  fail("format type '{}' for {} is not supported", std::string(1, t ? t : ' '), type_name(v));
}

std::string apply_spec(const Value& v, const Spec& spec) {
  if (v.is_string() || (!v.is_number())) {
    if (spec.type != 0 && spec.type != 's')
      fail("Unknown format code '{}' for object of type 'str'", spec.type);
    std::string s = to_str(v);
    if (spec.precision >= 0) {
      const std::u32string cps = unicode::decode(s);
      if (cps.size() > static_cast<size_t>(spec.precision))
        s = unicode::encode(cps.substr(0, spec.precision));
    }
    return pad(std::move(s), spec, '<');
  }
  return pad(format_number(v, spec), spec, '>');
}

// One `%` conversion: returns the formatted argument.
std::string percent_one(const Value& arg, char conv, Spec spec) {
  // `%` right-aligns strings too unless the '-' flag is given (str.format left-aligns them).
  if (!spec.align && (conv == 's' || conv == 'r')) spec.align = '>';
  switch (conv) {
    case 's':
      return apply_spec(Value::string(to_str(arg)), spec);
    case 'r':
      return apply_spec(Value::string(repr(arg)), spec);
    case 'd':
    case 'i':
    case 'x':
    case 'X':
    case 'o': {
      if (!arg.is_number()) fail("%{} format: a real number is required, not {}", conv, type_name(arg));
      const Value as_int = arg.is_float() ? Value::integer(static_cast<int64_t>(arg.as_double())) : arg;
      spec.type = (conv == 'i') ? 'd' : conv;
      return pad(format_number(as_int, spec), spec, '>');
    }
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G':
      if (!arg.is_number()) fail("must be real number, not {}", type_name(arg));
      spec.type = conv;
      return pad(format_number(arg, spec), spec, '>');
    case 'c':
      if (arg.is_string() && unicode::count_codepoints(arg.as_string()) == 1)
        return pad(arg.as_string(), spec, '>');
      if (arg.is_integral()) {
        std::string s;
        unicode::append_utf8(s, static_cast<char32_t>(arg.as_int()));
        return pad(s, spec, '>');
      }
      fail("%c requires int or char");
    default:
      fail("unsupported format character '{}'", conv);
  }
}

}  // namespace

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  const std::string_view sci(buf, res.ptr - buf);  // shortest round-trip, e.g. "-1.5e-05"
  const size_t e = sci.find('e');
  const bool neg = sci[0] == '-';
  std::string digits;
  for (char c : sci.substr(neg, e - neg)) {
    if (c != '.') digits.push_back(c);
  }
  const int exp10 = std::atoi(std::string(sci.substr(e + 1)).c_str());
  const int decpt = exp10 + 1;  // digits are 0.d1d2... * 10^decpt
  const int n = static_cast<int>(digits.size());
  std::string out = neg ? "-" : "";
  // CPython's repr switches to exponent notation outside 1e-4 <= |d| < 1e16.
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) return out + "0." + std::string(-decpt, '0') + digits;
    if (decpt >= n) return out + digits + std::string(decpt - n, '0') + ".0";
    return out + digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  return out + fmt::format("e{}{:02d}", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
}

std::string string_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : unicode::decode(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && !unicode::is_printable(cp))) {
      append_escaped_cp(out, cp);
    } else {
      unicode::append_utf8(out, cp);
    }
  }
  out.push_back(quote);
  return out;
}

std::optional<int64_t> parse_int(std::string_view text, int base) {
  std::string_view s = strip_space(text);
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) neg = s[0] == '-', s.remove_prefix(1);
  auto has_prefix = [&](char p) { return s.size() >= 2 && s[0] == '0' && (s[1] | 0x20) == p; };
  if ((base == 16 || base == 0) && has_prefix('x'))
    base = 16, s.remove_prefix(2);
  else if ((base == 8 || base == 0) && has_prefix('o'))
    base = 8, s.remove_prefix(2);
  else if ((base == 2 || base == 0) && has_prefix('b'))
    base = 2, s.remove_prefix(2);
  if (base == 0) {
    base = 10;
    // Base 0 forbids leading zeros in non-zero decimals ("010").
    if (s.size() > 1 && s[0] == '0' && s.find_first_not_of("0_") != std::string_view::npos)
      return std::nullopt;
  }
  if (!s.empty() && s[0] == '_' && base != 10) s.remove_prefix(1);  // "0x_1f" is valid
  auto clean = strip_underscores(s, [](char c) { return digit_value(c) < 36; });
  if (!clean || clean->empty()) return std::nullopt;
  uint64_t v = 0;
  for (char c : *clean) {
    const int d = digit_value(c);
    if (d >= base) return std::nullopt;
    if (v > (static_cast<uint64_t>(INT64_MAX) + 1 - d) / base) fail("integer '{}' exceeds 64 bits", text);
    v = v * base + d;
  }
  if (!neg && v > static_cast<uint64_t>(INT64_MAX)) fail("integer '{}' exceeds 64 bits", text);
  return neg ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
}

std::optional<double> parse_float(std::string_view text) {
  std::string_view s = strip_space(text);
  std::string lower;
  for (char c : s) lower.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
  std::string_view body = lower;
  const bool neg = !body.empty() && body[0] == '-';
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) body.remove_prefix(1);
  if (body == "inf" || body == "infinity") return neg ? -HUGE_VAL : HUGE_VAL;
  if (body == "nan") return std::nan("");
  auto clean = strip_underscores(body, [](char c) { return c >= '0' && c <= '9'; });
  if (!clean || clean->empty()) return std::nullopt;
  // Python's grammar: digits [. digits] [e [sign] digits] | . digits [...]; strtod is looser (hex, "in").
  size_t i = 0, digits = 0;
  while (i < clean->size() && std::isdigit(static_cast<unsigned char>((*clean)[i]))) ++i, ++digits;
  if (i < clean->size() && (*clean)[i] == '.') {
    for (++i; i < clean->size() && std::isdigit(static_cast<unsigned char>((*clean)[i])); ++i) ++digits;
  }
  if (digits == 0) return std::nullopt;
  if (i < clean->size() && (*clean)[i] == 'e') {
    ++i;
    if (i < clean->size() && ((*clean)[i] == '+' || (*clean)[i] == '-')) ++i;
    const size_t exp_start = i;
    while (i < clean->size() && std::isdigit(static_cast<unsigned char>((*clean)[i]))) ++i;
    if (i == exp_start) return std::nullopt;
  }
  if (i != clean->size()) return std::nullopt;
  const double v = std::strtod(clean->c_str(), nullptr);
  return neg ? -v : v;
}

std::string format_spec(const Value& v, std::string_view spec) {
  if (spec.empty()) return to_str(v);  // format(x, '') is str(x) for every type (True stays 'True')
  return apply_spec(v, parse_brace_spec(spec));
}

std::string percent_format(std::string_view f, const Value& args) {
  const bool is_tuple = args.is_flavor(SeqFlavor::Tuple);
  const bool is_mapping = args.is_dict();
  std::vector<Value> positional = is_tuple ? args.as_seq().items : std::vector<Value>{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out.push_back(f[i]);
      continue;
    }
    if (++i >= f.size()) fail("incomplete format");
    std::optional<Value> named;
    if (f[i] == '(') {
      const size_t close = f.find(')', i);
      if (!is_mapping || close == std::string_view::npos) fail("format requires a mapping");
      const Value* found = args.as_dict().find(string_value(f.substr(i + 1, close - i - 1)));
      if (!found) fail("KeyError: '{}'", f.substr(i + 1, close - i - 1));
      named = *found;
      i = close + 1;
    }
    Spec spec;
    for (; i < f.size() && std::string_view("-+ #0").find(f[i]) != std::string_view::npos; ++i) {
      if (f[i] == '-') spec.align = '<';
      if (f[i] == '+' || f[i] == ' ') spec.sign = f[i];
      if (f[i] == '0') spec.zero = true;
      if (f[i] == '#') spec.alternate = true;
    }
    for (; i < f.size() && std::isdigit(static_cast<unsigned char>(f[i])); ++i)
      spec.width = spec.width * 10 + (f[i] - '0');
    if (i < f.size() && f[i] == '.') {
      spec.precision = 0;
      for (++i; i < f.size() && std::isdigit(static_cast<unsigned char>(f[i])); ++i) {
        spec.precision = spec.precision * 10 + (f[i] - '0');
      }
    }
    if (i >= f.size()) fail("incomplete format");
    if (f[i] == '%') {
      out.push_back('%');
      continue;
    }
    if (spec.align == '<') spec.zero = false;
    if (named) {
      out += percent_one(*named, f[i], spec);
      continue;
    }
    if (next >= positional.size()) fail("not enough arguments for format string");
    out += percent_one(positional[next++], f[i], spec);
  }
  if (!is_mapping && next < positional.size()) fail("not all arguments converted during string formatting");
  return out;
}

std::string brace_format(std::string_view f, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}')
        ++i;
      else
        fail("Single '}' encountered in format string");
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string_view::npos) fail("Single '{' encountered in format string");
    std::string_view field = f.substr(i + 1, close - i - 1);
    i = close;
    std::string_view spec, conversion;
    if (size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec = field.substr(colon + 1), field = field.substr(0, colon);
    }
    if (size_t bang = field.find('!'); bang != std::string_view::npos) {
      conversion = field.substr(bang + 1), field = field.substr(0, bang);
    }
    if (field.find_first_of(".[{") != std::string_view::npos)
      fail("format field '{}' is not supported", field);
    const Value* arg = nullptr;
    if (field.empty() || std::isdigit(static_cast<unsigned char>(field[0]))) {
      const size_t index = field.empty() ? auto_index++ : std::stoul(std::string(field));
      if (index >= args.positional.size())
        fail("Replacement index {} out of range for positional args tuple", index);
      arg = &args.positional[index];
    } else {
      for (const auto& [k, v] : args.keyword) {
        if (k == field) arg = &v;
      }
      if (!arg) fail("KeyError: '{}'", field);
    }
    Value v = *arg;
    if (conversion == "r")
      v = Value::string(repr(v));
    else if (conversion == "s")
      v = Value::string(to_str(v));
    else if (!conversion.empty())
      fail("Unknown conversion specifier {}", conversion);
    out += format_spec(v, spec);
  }
  return out;
}

}  // namespace rill::text::jinja
