// Attributes of Python's builtin objects as jinja2's immutable sandbox exposes them: the str, list,
// tuple and dict methods (bound to their object), namespace attributes and the `loop` variable's fields.
#pragma once

#include <optional>
#include <string_view>

#include "text/jinja/value.h"

namespace rill::text::jinja {

// nullopt: the object has no attribute `name` (getattr then tries item lookup, as jinja2 does).
// An Undefined with `security` set: a mutating method the immutable sandbox blocks (list.append, ...);
// calling it fails with jinja2's SecurityError text.
// Fails: `name` is a real Python attribute rill does not implement, so nothing renders silently wrong.
std::optional<Value> builtin_attribute(const Value& obj, std::string_view name);

// Python str slicing/indexing helpers shared with getitem (code points, not bytes).
Value slice_value(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
                  std::optional<int64_t> step);

}  // namespace rill::text::jinja
