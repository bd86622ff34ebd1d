// Jinja tests (`x is defined`, `x is string`, ...): jinja2's default set, with its Python semantics.
#pragma once

#include <string_view>

#include "text/jinja/value.h"

namespace rill::text::jinja {

bool test_exists(std::string_view name);
// Fails ("No test named 'x'.") for an unknown test, as jinja2 does when the test is reached.
bool apply_test(Interpreter& in, std::string_view name, const Value& operand, CallArgs& args);

}  // namespace rill::text::jinja
