// Value: a Python object as a Jinja template sees it. Lists, tuples and dicts are immutable once built (the
// immutable sandbox blocks every mutating method), so they are shared by pointer; only namespaces and loop
// state change. Python semantics live in the free functions below: truthiness, str()/repr(), ==, ordering.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace rill::text::jinja {

class Value;
class Interpreter;

// Which Python type a sequence stands for: they iterate alike but print, measure and compare differently.
enum class SeqFlavor {
  List,
  Tuple,
  Range,      // range(): printing it is refused (rill keeps only the items)
  Generator,  // map/select/...: always truthy, no len(), no indexing, consumed by iteration
  DictKeys,   // dict.keys() / .values() / .items() views: sized, not indexable
  DictValues,
  DictItems,
  ListReverse,  // reversed(list) (the reverse filter): like a generator
};

struct SeqData {
  std::vector<Value> items;
  SeqFlavor flavor = SeqFlavor::List;
  mutable bool consumed = false;  // generators are single-pass
};

// An insertion-ordered Python dict. Keys compare with Python ==, so 1, 1.0 and True are one key.
class DictData {
 public:
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;  // a string key, without building a Value
  void set(const Value& key, Value value);        // overwrites in place, keeping the first key's position
  size_t size() const;  // out of line: clang instantiates it here, where Value is incomplete
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }

 private:
  std::vector<std::pair<Value, Value>> items_;
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // Fast path: JSON keys are strings. Transparent, so lookups by string_view allocate nothing.
  std::unordered_map<std::string, size_t, StringHash, std::equal_to<>> string_index_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFn = std::function<Value(Interpreter&, CallArgs&)>;

struct Function {
  enum class Kind { Builtin, Method, Macro };
  std::string name;
  Kind kind = Kind::Builtin;
  NativeFn call;
};

// A `namespace(...)` object: the one mutable container (`{% set ns.attr = ... %}`).
struct NamespaceData {
  DictData attrs;
};

// The `loop` variable of a for loop.
struct LoopState {
  std::vector<Value> items;
  size_t index0 = 0;
  int depth = 1;
  std::optional<std::vector<Value>> last_changed;  // loop.changed() memory
};

struct UndefinedInfo {
  std::string message;    // what using it raises: "'x' is undefined", "... has no attribute ..."
  bool security = false;  // an attribute the sandbox blocked: calling it raises SecurityError
};

struct NoneValue {};

// Strings are immutable and often large (message contents): shared, so copying a Value never copies text.
struct StringValue {
  std::shared_ptr<const std::string> text;
  bool markup = false;  // produced by |safe or |escape: `+` escapes the other operand, as markupsafe does
};

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, Seq, Dict, Namespace, Function, Loop };

  Value() : v_(UndefinedInfo{}) {}
  static Value undefined(std::string message, bool security = false) {
    return Value(UndefinedInfo{std::move(message), security});
  }
  static Value none() { return Value(NoneValue{}); }
  static Value boolean(bool b) { return Value(b); }
  static Value integer(int64_t i) { return Value(i); }
  static Value floating(double d) { return Value(d); }
  static Value string(std::string s, bool markup = false) {
    return Value(StringValue{std::make_shared<const std::string>(std::move(s)), markup});
  }
  static Value seq(std::vector<Value> items, SeqFlavor flavor = SeqFlavor::List);
  static Value dict(DictData d) { return Value(std::make_shared<const DictData>(std::move(d))); }
  static Value ns(std::shared_ptr<NamespaceData> n) { return Value(std::move(n)); }
  static Value function(std::string name, Function::Kind kind, NativeFn fn);
  static Value loop(std::shared_ptr<LoopState> l) { return Value(std::move(l)); }

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::Undefined; }
  bool is_none() const { return kind() == Kind::None; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_float() const { return kind() == Kind::Float; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }  // Python's numbers.Number
  bool is_integral() const { return is_bool() || is_int(); }              // usable as an int
  bool is_string() const { return kind() == Kind::String; }
  bool is_seq() const { return kind() == Kind::Seq; }
  bool is_dict() const { return kind() == Kind::Dict; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return is_bool() ? static_cast<int64_t>(as_bool()) : std::get<int64_t>(v_); }
  double as_double() const { return is_float() ? std::get<double>(v_) : static_cast<double>(as_int()); }
  const std::string& as_string() const { return *std::get<StringValue>(v_).text; }
  bool is_markup() const { return is_string() && std::get<StringValue>(v_).markup; }
  const SeqData& as_seq() const { return *std::get<std::shared_ptr<const SeqData>>(v_); }
  const DictData& as_dict() const { return *std::get<std::shared_ptr<const DictData>>(v_); }
  NamespaceData& as_namespace() const { return *std::get<std::shared_ptr<NamespaceData>>(v_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<const Function>>(v_); }
  LoopState& as_loop() const { return *std::get<std::shared_ptr<LoopState>>(v_); }
  const UndefinedInfo& as_undefined() const { return std::get<UndefinedInfo>(v_); }

  bool is_flavor(SeqFlavor f) const { return is_seq() && as_seq().flavor == f; }
  // Same object (Python `is`) for the pointer kinds; same value for the immutable scalars.
  bool same_object(const Value& other) const;
  // The shared object behind a pointer kind (identity hashing); nullptr for scalars and strings.
  const void* identity() const;

 private:
  using Storage = std::variant<UndefinedInfo, NoneValue, bool, int64_t, double, StringValue,
                               std::shared_ptr<const SeqData>, std::shared_ptr<const DictData>,
                               std::shared_ptr<NamespaceData>, std::shared_ptr<const Function>,
                               std::shared_ptr<LoopState>>;
  template <typename T>
  explicit Value(T v) : v_(std::move(v)) {}
  Storage v_;
};

Value string_value(std::string_view s);
Value tuple_value(std::vector<Value> items);

// Python type names, as error messages and `'dict object' has no attribute` print them.
std::string type_name(const Value& v);

bool truthy(const Value& v);
// str(v) as `{{ v }}` and `~` print it; fails for objects whose str() shows a memory address.
std::string to_str(const Value& v);
std::string repr(const Value& v);

bool equals(const Value& a, const Value& b);
// Python's <: negative, zero or positive; fails ("'<' not supported ...") for unorderable pairs.
int compare(const Value& a, const Value& b);

// len(v); fails for unsized values (numbers, generators, None).
size_t length(const Value& v);
// iter(v) drained into a vector: strings yield characters, dicts their keys, Undefined nothing.
std::vector<Value> iterate(const Value& v);
// Python `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);
// A hashable key for unique/sets: fails for unhashable values (lists, dicts), as Python does.
std::string hash_key(const Value& v);

}  // namespace rill::text::jinja
