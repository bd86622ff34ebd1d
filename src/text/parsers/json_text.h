// JSON helpers for tool-call arguments that never throw (nlohmann's dump throws on invalid UTF-8).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace rill::text {

// Parses `text` keeping object key order (text/json's bounded parser); nullopt when it is not valid JSON or
// is nested deeper than kMaxJsonDepth.
std::optional<nlohmann::ordered_json> parse_json(std::string_view text);
// Compact JSON ("," and ":" separators), UTF-8 kept as is, invalid bytes replaced by U+FFFD.
std::string dump_compact(const nlohmann::ordered_json& value);
// "object", "array", "string", "number", "boolean" or "null": the XTML type names.
const char* json_type_name(const nlohmann::ordered_json& value);

}  // namespace rill::text
