// Python-style argument binding for the engine's native functions (filters, tests, methods, globals).
#pragma once

#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include "text/jinja/value.h"

namespace rill::text::jinja {

struct Param {
  std::string_view name;
  std::optional<Value> default_value;  // nullopt: required
};

// Binds positional arguments in order, then keywords by name; fails as Python does on a missing,
// repeated or unexpected argument. The result has one Value per parameter.
std::vector<Value> bind_args(std::string_view fn, const CallArgs& args, std::initializer_list<Param> params);

// Integer argument (Python accepts bool where int is expected); fails naming the function otherwise.
int64_t int_arg(std::string_view fn, const Value& v);
// str argument; fails naming the function otherwise.
const std::string& str_arg(std::string_view fn, const Value& v);

}  // namespace rill::text::jinja
