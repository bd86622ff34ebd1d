// Python-compatible text for JSON values: the K3 reference renderer is Python, so prompts contain
// json.dumps(..., ensure_ascii=False) output and str() of scalars, byte for byte.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace rill::text::k3 {

using Json = nlohmann::ordered_json;

enum class JsonSeparators {
  Compact,  // separators=(",", ":")
  Default,  // json.dumps' defaults (", ", ": ")
};

// json.dumps(value, ensure_ascii=False, separators=..., sort_keys=sort_keys). Floats use Python's repr
// (shortest round-trip digits, exponent form below 1e-4 and from 1e16 on); keys sort by code point.
std::string python_json_dumps(const Json& value, JsonSeparators separators, bool sort_keys);

// str(value) for a scalar (True/False/None, Python's float repr); objects and arrays are an error.
Result<std::string> python_str(const Json& value);

// Python truthiness: null, false, 0, "", [] and {} are false.
bool python_truthy(const Json& value);

// str.strip() (Python's whitespace: str.isspace()).
std::string_view python_strip(std::string_view text);

}  // namespace rill::text::k3
