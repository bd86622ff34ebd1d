#include "text/jinja/builtins.h"

#include <ctime>
#include <memory>

#include "text/jinja/arguments.h"
#include "text/jinja/error.h"

namespace rill::text::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

Value builtin(std::string name, NativeFn fn) {
  return Value::function(std::move(name), Function::Kind::Builtin, std::move(fn));
}

Value range_fn(Interpreter&, CallArgs& a) {
  if (!a.keyword.empty()) fail("range() takes no keyword arguments");
  if (a.positional.empty() || a.positional.size() > 3)
    fail("range expected 1 to 3 arguments, got {}", a.positional.size());
  int64_t start = 0, stop = 0, step = 1;
  if (a.positional.size() == 1) {
    stop = int_arg("range", a.positional[0]);
  } else {
    start = int_arg("range", a.positional[0]);
    stop = int_arg("range", a.positional[1]);
    if (a.positional.size() == 3) step = int_arg("range", a.positional[2]);
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  const int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                             : (start > stop ? (start - stop - step - 1) / -step : 0);
  if (n > kMaxRange) fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange);
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) items.push_back(Value::integer(start + i * step));
  return Value::seq(std::move(items), SeqFlavor::Range);
}

// dict(mapping_or_pairs, **kwargs), as Python's dict() (jinja2 exposes the builtin).
DictData build_dict(const CallArgs& a, std::string_view fn) {
  if (a.positional.size() > 1) fail("{} expected at most 1 argument, got {}", fn, a.positional.size());
  DictData d;
  if (!a.positional.empty()) {
    const Value& src = a.positional[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.as_dict().items()) d.set(k, v);
    } else {
      for (const Value& pair : iterate(src)) {
        const std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2)
          fail("dictionary update sequence element has length {}; 2 is required", kv.size());
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : a.keyword) d.set(string_value(k), v);
  return d;
}

Value strftime_now(Interpreter&, CallArgs& a) {
  const std::string format =
      str_arg("strftime_now", bind_args("strftime_now", a, {{"fmt", std::nullopt}})[0]);
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string buf(256 + format.size() * 8, '\0');
  const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &local);
  if (n == 0 && !format.empty()) fail("strftime_now(): format '{}' produced no output", format);
  buf.resize(n);
  return Value::string(std::move(buf));
}

}  // namespace

DictData make_globals() {
  DictData g;
  g.set(string_value("range"), builtin("range", range_fn));
  g.set(string_value("dict"),
        builtin("dict", [](Interpreter&, CallArgs& a) { return Value::dict(build_dict(a, "dict")); }));
  g.set(string_value("namespace"), builtin("namespace", [](Interpreter&, CallArgs& a) {
          auto ns = std::make_shared<NamespaceData>();
          ns->attrs = build_dict(a, "namespace");
          return Value::ns(std::move(ns));
        }));
  g.set(string_value("raise_exception"), builtin("raise_exception", [](Interpreter&, CallArgs& a) -> Value {
          const Value msg = bind_args("raise_exception", a, {{"message", std::nullopt}})[0];
          throw Error{to_str(msg), 0, true};
        }));
  g.set(string_value("strftime_now"), builtin("strftime_now", strftime_now));
  for (const char* name : {"lipsum", "cycler", "joiner"}) {
    g.set(string_value(name), builtin(name, [name](Interpreter&, CallArgs&) -> Value {
            fail("{}() is not supported by rill's Jinja engine", name);
          }));
  }
  return g;
}

}  // namespace rill::text::jinja
