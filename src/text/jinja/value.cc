#include "text/jinja/value.h"

#include <algorithm>

#include "text/jinja/error.h"
#include "text/jinja/py_format.h"
#include "text/jinja/unicode.h"

namespace rill::text::jinja {
namespace {

bool is_sequence_like(const Value& v) {
  return v.is_flavor(SeqFlavor::List) || v.is_flavor(SeqFlavor::Tuple) || v.is_flavor(SeqFlavor::Range);
}

std::string seq_repr(const SeqData& s) {
  std::string out;
  const char* open = s.flavor == SeqFlavor::Tuple ? "(" : "[";
  const char* close = s.flavor == SeqFlavor::Tuple ? ")" : "]";
  out += open;
  for (size_t i = 0; i < s.items.size(); ++i) {
    if (i) out += ", ";
    out += repr(s.items[i]);
  }
  if (s.flavor == SeqFlavor::Tuple && s.items.size() == 1) out += ",";
  out += close;
  return out;
}

std::string dict_repr(const DictData& d) {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : d.items()) {
    if (!first) out += ", ";
    first = false;
    out += repr(k) + ": " + repr(v);
  }
  return out + "}";
}

[[noreturn]] void fail_unprintable(const Value& v) {
  fail("cannot render a {} object: Python prints its memory address, which no template should depend on",
       type_name(v));
}

[[noreturn]] void fail_order(const Value& a, const Value& b) {
  fail("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

int three_way(double a, double b) {
  return a < b ? -1 : (a > b ? 1 : 0);
}

int compare_seq(const SeqData& a, const SeqData& b) {
  const size_t n = std::min(a.items.size(), b.items.size());
  for (size_t i = 0; i < n; ++i) {
    if (!equals(a.items[i], b.items[i])) return compare(a.items[i], b.items[i]);
  }
  return a.items.size() < b.items.size() ? -1 : (a.items.size() > b.items.size() ? 1 : 0);
}

bool dict_equals(const DictData& a, const DictData& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, v] : a.items()) {
    const Value* other = b.find(k);
    if (!other || !equals(v, *other)) return false;
  }
  return true;
}

bool consume_once(const SeqData& s) {
  const bool single_pass = s.flavor == SeqFlavor::Generator || s.flavor == SeqFlavor::ListReverse;
  if (!single_pass) return false;
  const bool was = s.consumed;
  s.consumed = true;
  return was;
}

}  // namespace

// --- DictData ---------------------------------------------------------------------------------------

size_t DictData::size() const {
  return items_.size();
}

const Value* DictData::find(std::string_view key) const {
  auto it = string_index_.find(key);
  return it == string_index_.end() ? nullptr : &items_[it->second].second;
}

const Value* DictData::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : items_) {
    if (!k.is_string() && equals(k, key)) return &v;
  }
  return nullptr;
}

void DictData::set(const Value& key, Value value) {
  if (key.is_string()) {
    auto [it, inserted] = string_index_.emplace(key.as_string(), items_.size());
    if (!inserted) {
      items_[it->second].second = std::move(value);
      return;
    }
    items_.emplace_back(key, std::move(value));
    return;
  }
  (void)hash_key(key);  // unhashable keys fail here, as in Python
  for (auto& [k, v] : items_) {
    if (!k.is_string() && equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items_.emplace_back(key, std::move(value));
}

// --- Value ------------------------------------------------------------------------------------------

Value Value::seq(std::vector<Value> items, SeqFlavor flavor) {
  auto data = std::make_shared<SeqData>();
  data->items = std::move(items);
  data->flavor = flavor;
  return Value(std::shared_ptr<const SeqData>(std::move(data)));
}

Value Value::function(std::string name, Function::Kind kind, NativeFn fn) {
  return Value(std::make_shared<const Function>(Function{std::move(name), kind, std::move(fn)}));
}

const void* Value::identity() const {
  return std::visit(
      [](const auto& a) -> const void* {
        using T = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<T, UndefinedInfo> || std::is_same_v<T, NoneValue> ||
                      std::is_same_v<T, StringValue> || std::is_arithmetic_v<T>) {
          return nullptr;
        } else {
          return a.get();
        }
      },
      v_);
}

bool Value::same_object(const Value& other) const {
  if (kind() != other.kind()) return false;
  const void* id = identity();
  return id ? id == other.identity() : equals(*this, other);
}

Value string_value(std::string_view s) {
  return Value::string(std::string(s));
}
Value tuple_value(std::vector<Value> items) {
  return Value::seq(std::move(items), SeqFlavor::Tuple);
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "Undefined";
    case Value::Kind::None:
      return "NoneType";
    case Value::Kind::Bool:
      return "bool";
    case Value::Kind::Int:
      return "int";
    case Value::Kind::Float:
      return "float";
    case Value::Kind::String:
      return v.is_markup() ? "Markup" : "str";
    case Value::Kind::Dict:
      return "dict";
    case Value::Kind::Namespace:
      return "Namespace";
    case Value::Kind::Function:
      return v.as_function().kind == Function::Kind::Macro ? "Macro" : "builtin_function_or_method";
    case Value::Kind::Loop:
      return "LoopContext";
    case Value::Kind::Seq:
      switch (v.as_seq().flavor) {
        case SeqFlavor::List:
          return "list";
        case SeqFlavor::Tuple:
          return "tuple";
        case SeqFlavor::Range:
          return "range";
        case SeqFlavor::Generator:
          return "generator";
        case SeqFlavor::DictKeys:
          return "dict_keys";
        case SeqFlavor::DictValues:
          return "dict_values";
        case SeqFlavor::DictItems:
          return "dict_items";
        case SeqFlavor::ListReverse:
          return "list_reverseiterator";
      }
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return false;
    case Value::Kind::Bool:
      return v.as_bool();
    case Value::Kind::Int:
      return v.as_int() != 0;
    case Value::Kind::Float:
      return v.as_double() != 0.0;
    case Value::Kind::String:
      return !v.as_string().empty();
    case Value::Kind::Dict:
      return v.as_dict().size() != 0;
    case Value::Kind::Seq:
      // Iterators have no __len__ or __bool__: Python treats them as true even when empty.
      if (v.is_flavor(SeqFlavor::Generator) || v.is_flavor(SeqFlavor::ListReverse)) return true;
      return !v.as_seq().items.empty();
    case Value::Kind::Namespace:
    case Value::Kind::Function:
    case Value::Kind::Loop:
      return true;
  }
  return true;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "";
    case Value::Kind::String:
      return v.as_string();
    default:
      return repr(v);
  }
}

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "Undefined";
    case Value::Kind::None:
      return "None";
    case Value::Kind::Bool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::Int:
      return std::to_string(v.as_int());
    case Value::Kind::Float:
      return float_repr(v.as_double());
    case Value::Kind::String:
      return v.is_markup() ? "Markup(" + string_repr(v.as_string()) + ")" : string_repr(v.as_string());
    case Value::Kind::Dict:
      return dict_repr(v.as_dict());
    case Value::Kind::Namespace:
      return "<Namespace " + dict_repr(v.as_namespace().attrs) + ">";
    case Value::Kind::Loop: {
      const LoopState& l = v.as_loop();
      return "<LoopContext " + std::to_string(l.index0 + 1) + "/" + std::to_string(l.items.size()) + ">";
    }
    case Value::Kind::Function:
      if (v.as_function().kind == Function::Kind::Macro) return "<Macro '" + v.as_function().name + "'>";
      fail_unprintable(v);
    case Value::Kind::Seq:
      switch (v.as_seq().flavor) {
        case SeqFlavor::List:
        case SeqFlavor::Tuple:
          return seq_repr(v.as_seq());
        case SeqFlavor::DictKeys:
        case SeqFlavor::DictValues:
        case SeqFlavor::DictItems:
          return type_name(v) + "(" + seq_repr(v.as_seq()) + ")";
        case SeqFlavor::Range:
        case SeqFlavor::Generator:
        case SeqFlavor::ListReverse:
          fail_unprintable(v);
      }
  }
  fail_unprintable(v);
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.as_string() == b.as_string();
    case Value::Kind::Dict:
      return dict_equals(a.as_dict(), b.as_dict());
    case Value::Kind::Seq: {
      const SeqData& x = a.as_seq();
      const SeqData& y = b.as_seq();
      if (x.flavor != y.flavor) return false;
      // Views and iterators compare by identity (keys views compare as sets; not worth emulating).
      if (!is_sequence_like(a)) return a.same_object(b);
      if (x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!equals(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    default:
      return a.same_object(b);
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return three_way(a.as_double(), b.as_double());
    return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order, which is how Python compares str.
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_seq() && b.is_seq() && a.as_seq().flavor == b.as_seq().flavor &&
      (a.is_flavor(SeqFlavor::List) || a.is_flavor(SeqFlavor::Tuple))) {
    return compare_seq(a.as_seq(), b.as_seq());
  }
  if (a.is_undefined() || b.is_undefined()) {
    fail(a.is_undefined() ? a.as_undefined().message : b.as_undefined().message);
  }
  fail_order(a, b);
}

size_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return 0;
    case Value::Kind::String:
      return unicode::count_codepoints(v.as_string());
    case Value::Kind::Dict:
      return v.as_dict().size();
    case Value::Kind::Namespace:
      break;
    case Value::Kind::Loop:
      break;
    case Value::Kind::Seq:
      if (v.is_flavor(SeqFlavor::Generator) || v.is_flavor(SeqFlavor::ListReverse)) break;
      return v.as_seq().items.size();
    default:
      break;
  }
  fail("object of type '{}' has no len()", type_name(v));
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return {};
    case Value::Kind::String: {
      std::vector<Value> out;
      for (char32_t cp : unicode::decode(v.as_string())) {
        std::string s;
        unicode::append_utf8(s, cp);
        out.push_back(Value::string(std::move(s)));
      }
      return out;
    }
    case Value::Kind::Dict: {
      std::vector<Value> out;
      for (const auto& kv : v.as_dict().items()) out.push_back(kv.first);
      return out;
    }
    case Value::Kind::Seq:
      if (consume_once(v.as_seq())) return {};
      return v.as_seq().items;
    default:
      fail("'{}' object is not iterable", type_name(v));
  }
}

bool contains(const Value& haystack, const Value& needle) {
  if (haystack.is_string()) {
    if (!needle.is_string()) {
      fail("'in <string>' requires string as left operand, not {}", type_name(needle));
    }
    return haystack.as_string().find(needle.as_string()) != std::string::npos;
  }
  if (haystack.is_dict()) return haystack.as_dict().find(needle) != nullptr;
  if (haystack.is_undefined()) return false;
  if (!haystack.is_seq()) fail("argument of type '{}' is not iterable", type_name(haystack));
  for (const Value& item : iterate(haystack)) {
    if (equals(item, needle)) return true;
  }
  return false;
}

std::string hash_key(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::None:
      return "n";
    // Python hashes equal numbers equally: 1, 1.0 and True are one key.
    case Value::Kind::Bool:
    case Value::Kind::Int:
      return "i" + std::to_string(v.as_int());
    case Value::Kind::Float: {
      const double d = v.as_double();
      if (d == static_cast<double>(static_cast<int64_t>(d)))
        return "i" + std::to_string(static_cast<int64_t>(d));
      return "f" + float_repr(d);
    }
    case Value::Kind::String:
      return "s" + v.as_string();
    case Value::Kind::Seq:
      if (v.is_flavor(SeqFlavor::Tuple)) {
        std::string key = "t(";
        for (const Value& item : v.as_seq().items) key += hash_key(item) + ",";
        return key + ")";
      }
      break;
    case Value::Kind::Undefined:
    case Value::Kind::Dict:
    case Value::Kind::Namespace:
    case Value::Kind::Function:
    case Value::Kind::Loop:
      break;
  }
  if (v.is_undefined()) return "u";
  if (v.is_dict() || v.is_seq()) fail("unhashable type: '{}'", type_name(v));
  return fmt::format("o{}", v.identity());  // namespaces, functions: hashed by identity
}

}  // namespace rill::text::jinja
