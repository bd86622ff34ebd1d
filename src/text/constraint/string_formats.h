// JSON Schema `format` values that a grammar can enforce, each as a pattern (regex.h) for the whole string.
// The patterns accept a subset of each format (one canonical spelling where the format allows several),
// every string of which the format's definition accepts: ajv-formats' full mode and the RFCs it follows.
#pragma once

#include <optional>
#include <string_view>

namespace rill::text::constraint {

// The pattern of a string format, nullopt for a name that is not one of them.
std::optional<std::string_view> string_format_pattern(std::string_view format);
// "date, time, ..." for error messages.
std::string_view string_format_names();

}  // namespace rill::text::constraint
