#include "text/jinja/json.h"

#include <algorithm>
#include <cmath>

#include "text/jinja/error.h"
#include "text/jinja/py_format.h"
#include "text/jinja/unicode.h"

namespace rill::text::jinja {
namespace {

void append_u_escape(std::string& out, unsigned unit) {
  out += fmt::format("\\u{:04x}", unit);
}

// json.dumps string encoding: py_encode_basestring(_ascii).
void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  for (char32_t cp : unicode::decode(s)) {
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20 || (ensure_ascii && cp > 0x7E)) {
      if (cp >= 0x10000) {
        const unsigned v = static_cast<unsigned>(cp) - 0x10000;
        append_u_escape(out, 0xD800 | (v >> 10));
        append_u_escape(out, 0xDC00 | (v & 0x3FF));
      } else {
        append_u_escape(out, static_cast<unsigned>(cp));
      }
      continue;
    }
    unicode::append_utf8(out, cp);
  }
  out.push_back('"');
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return float_repr(d);
}

// json.dumps turns non-string keys into strings; other key types are a TypeError.
std::string key_text(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::String:
      return k.as_string();
    case Value::Kind::Bool:
      return k.as_bool() ? "true" : "false";
    case Value::Kind::None:
      return "null";
    case Value::Kind::Int:
      return std::to_string(k.as_int());
    case Value::Kind::Float:
      return json_float(k.as_double());
    default:
      fail("keys must be str, int, float, bool or None, not {}", type_name(k));
  }
}

class Dumper {
 public:
  explicit Dumper(const DumpOptions& o) : o_(o) {}

  void dump(const Value& v, int level, std::string& out) {
    switch (v.kind()) {
      case Value::Kind::None:
        out += "null";
        return;
      case Value::Kind::Bool:
        out += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::Int:
        out += std::to_string(v.as_int());
        return;
      case Value::Kind::Float:
        out += json_float(v.as_double());
        return;
      case Value::Kind::String:
        append_json_string(out, v.as_string(), o_.ensure_ascii);
        return;
      case Value::Kind::Dict:
        dump_dict(v.as_dict(), level, out);
        return;
      case Value::Kind::Seq:
        if (v.is_flavor(SeqFlavor::List) || v.is_flavor(SeqFlavor::Tuple)) {
          dump_list(v.as_seq().items, level, out);
          return;
        }
        break;
      case Value::Kind::Undefined:
      case Value::Kind::Namespace:
      case Value::Kind::Function:
      case Value::Kind::Loop:
        break;
    }
    fail("Object of type {} is not JSON serializable", type_name(v));
  }

 private:
  void newline(int level, std::string& out) const {
    if (!o_.indent) return;
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *o_.indent;
  }

  void dump_list(const std::vector<Value>& items, int level, std::string& out) {
    if (items.empty()) {
      out += "[]";
      return;
    }
    out.push_back('[');
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += o_.item_separator;
      newline(level + 1, out);
      dump(items[i], level + 1, out);
    }
    newline(level, out);
    out.push_back(']');
  }

  void dump_dict(const DictData& d, int level, std::string& out) {
    if (d.size() == 0) {
      out += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> items;
    for (const auto& kv : d.items()) items.push_back(&kv);
    if (o_.sort_keys) {
      std::stable_sort(items.begin(), items.end(),
                       [](const auto* a, const auto* b) { return compare(a->first, b->first) < 0; });
    }
    out.push_back('{');
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += o_.item_separator;
      newline(level + 1, out);
      append_json_string(out, key_text(items[i]->first), o_.ensure_ascii);
      out += o_.key_separator;
      dump(items[i]->second, level + 1, out);
    }
    newline(level, out);
    out.push_back('}');
  }

  const DumpOptions& o_;
};

}  // namespace

Value from_json(const nlohmann::ordered_json& j) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null:
      return Value::none();
    case T::boolean:
      return Value::boolean(j.get<bool>());
    case T::number_integer:
      return Value::integer(j.get<int64_t>());
    case T::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) fail("integer {} exceeds 64 bits", u);
      return Value::integer(static_cast<int64_t>(u));
    }
    case T::number_float:
      return Value::floating(j.get<double>());
    case T::string:
      return Value::string(j.get<std::string>());
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return Value::seq(std::move(items));
    }
    case T::object: {
      DictData d;
      for (const auto& [k, v] : j.items()) d.set(string_value(k), from_json(v));
      return Value::dict(std::move(d));
    }
    case T::binary:
    case T::discarded:
      break;
  }
  fail("unsupported JSON value");
}

std::string dumps(const Value& v, const DumpOptions& options) {
  std::string out;
  Dumper(options).dump(v, 0, out);
  return out;
}

}  // namespace rill::text::jinja
