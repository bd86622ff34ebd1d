#include "text/k3/python_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <vector>

#include "text/tokenizer/unicode_classes.h"
#include "text/tokenizer/utf8.h"

namespace rill::text::k3 {
namespace {

void append_string(std::string_view s, std::string& out) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// float.__repr__: shortest round-trip digits; exponent form when the decimal point would sit more than 16
// digits right of the first digit or 4+ places left of it.
std::string python_float_repr(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";  // json.dumps' spelling
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string_view sci(buf, res.ptr - buf);  // "-d.ddde+XX"
  std::string out;
  if (sci[0] == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits(sci.substr(0, e));
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exp10 = 0;
  std::from_chars(sci.data() + e + (sci[e + 1] == '+' ? 2 : 1), sci.data() + sci.size(), exp10);
  const int decpt = exp10 + 1;  // digits d1 d2 ... = 0.d1d2... * 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= n) {
      out += digits + std::string(decpt - n, '0') + ".0";
    } else {
      // Appended piece by piece: GCC 12 at -O3 flags `"." + std::string` with a -Wrestrict false positive.
      out.append(digits, 0, decpt).append(1, '.').append(digits, decpt);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (n > 1) out.append(1, '.').append(digits, 1);
  out += fmt::format("e{}{:02d}", exp10 < 0 ? '-' : '+', std::abs(exp10));
  return out;
}

void dump(const Json& v, JsonSeparators sep, bool sort_keys, std::string& out) {
  const char* item_sep = sep == JsonSeparators::Compact ? "," : ", ";
  const char* key_sep = sep == JsonSeparators::Compact ? ":" : ": ";
  switch (v.type()) {
    case Json::value_t::object: {
      std::vector<std::pair<const std::string*, const Json*>> items;
      for (auto it = v.begin(); it != v.end(); ++it) items.emplace_back(&it.key(), &it.value());
      if (sort_keys) {
        // UTF-8 byte order is code point order, which is how Python sorts str keys.
        std::sort(items.begin(), items.end(),
                  [](const auto& a, const auto& b) { return *a.first < *b.first; });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        append_string(*items[i].first, out);
        out += key_sep;
        dump(*items[i].second, sep, sort_keys, out);
      }
      out += '}';
      return;
    }
    case Json::value_t::array:
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) out += item_sep;
        dump(v[i], sep, sort_keys, out);
      }
      out += ']';
      return;
    case Json::value_t::string:
      append_string(v.get_ref<const std::string&>(), out);
      return;
    case Json::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      return;
    case Json::value_t::number_integer:
      out += std::to_string(v.get<int64_t>());
      return;
    case Json::value_t::number_unsigned:
      out += std::to_string(v.get<uint64_t>());
      return;
    case Json::value_t::number_float:
      out += python_float_repr(v.get<double>());
      return;
    case Json::value_t::null:
    case Json::value_t::discarded:
      out += "null";
      return;
    case Json::value_t::binary:
      out += "null";  // never produced by the JSON parser
      return;
  }
}

}  // namespace

std::string python_json_dumps(const Json& value, JsonSeparators separators, bool sort_keys) {
  std::string out;
  dump(value, separators, sort_keys, out);
  return out;
}

Result<std::string> python_str(const Json& value) {
  switch (value.type()) {
    case Json::value_t::string:
      return value.get<std::string>();
    case Json::value_t::boolean:
      return std::string(value.get<bool>() ? "True" : "False");
    case Json::value_t::null:
      return std::string("None");
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return python_json_dumps(value, JsonSeparators::Compact, false);
    case Json::value_t::object:
    case Json::value_t::array:
    case Json::value_t::binary:
    case Json::value_t::discarded:
      break;
  }
  return invalid_argument("expected a string or a number, got {}", value.type_name());
}

bool python_truthy(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded:
      return false;
    case Json::value_t::boolean:
      return value.get<bool>();
    case Json::value_t::number_integer:
      return value.get<int64_t>() != 0;
    case Json::value_t::number_unsigned:
      return value.get<uint64_t>() != 0;
    case Json::value_t::number_float:
      return value.get<double>() != 0.0;
    case Json::value_t::string:
      return !value.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object:
    case Json::value_t::binary:
      return !value.empty();
  }
  return false;
}

std::string_view python_strip(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  size_t first = text.size(), last = 0;
  for (size_t i = 0; i < text.size();) {
    int len;
    const uint32_t cp = utf8_decode(p + i, end, &len);
    if (cp == kInvalidCodePoint || !python_isspace(cp)) {
      first = std::min(first, i);
      last = i + len;
    }
    i += len;
  }
  return first >= last ? std::string_view() : text.substr(first, last - first);
}

}  // namespace rill::text::k3
