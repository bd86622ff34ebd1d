// Python's text conversions that templates observe: float repr, str repr (quote choice, escapes), the
// `%` operator, str.format, and int()/float() parsing of strings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja/value.h"

namespace rill::text::jinja {

std::string float_repr(double d);             // repr(float): shortest round-trip, '1e-05', '1e+16', 'inf'
std::string string_repr(std::string_view s);  // repr(str): 'it' / "it's", \n \x00 \u200b escapes

std::optional<int64_t> parse_int(std::string_view s, int base);  // int(str, base); nullopt on ValueError
std::optional<double> parse_float(std::string_view s);           // float(str); nullopt on ValueError

// `fmt % args` with conversions s r d i f F e E g G x X o c % and flags/width/precision.
std::string percent_format(std::string_view fmt, const Value& args);
// str.format: {} {0} {name} {0.attr}-free fields, !s !r conversions and the common format specs.
std::string brace_format(std::string_view fmt, const CallArgs& args);
// format(value, spec) for the spec mini-language subset brace_format supports.
std::string format_spec(const Value& v, std::string_view spec);

}  // namespace rill::text::jinja
