// Python's arithmetic operators as jinja2 applies them (`+ - * / // % **`, unary -/+): int/float/bool
// promotion, floor division and modulo with the divisor's sign, str/list concatenation and repetition,
// `str % args` formatting. Results that would outgrow the render limits fail instead.
#pragma once

#include <string>
#include <string_view>

#include "text/jinja/value.h"

namespace rill::text::jinja {

Value binary_op(Interpreter& in, std::string_view op, const Value& a, const Value& b);
Value unary_op(char op, const Value& v);
// markupsafe.escape: & < > " ' as HTML entities (the escape filter; str operands joined to a Markup string).
std::string html_escape(std::string_view s);

}  // namespace rill::text::jinja
