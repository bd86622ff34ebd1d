// JSON text from outside the process (request bodies, tool-call arguments in chat history, JSON a model
// generates) parsed with bounds: nesting at most kMaxJsonDepth arrays/objects deep, so that nothing
// recursive run on the result afterwards (nlohmann's copy, dump(), destructor, Jinja's tojson, the schema
// compiler) can overflow the stack; and objects built in linear time, in key order (tool schemas are
// rendered and JSON-schema properties generated in request order), without ordered_json's linear scan per
// inserted key (100k keys in one object took 35 s through ordered_json::parse).
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace rill::text {

// Arrays + objects nested in one another; the request JSON of every OpenAI client is a few levels deep.
inline constexpr int kMaxJsonDepth = 128;

// Parses all of `text` (trailing non-space is an error), keeping object key order; a duplicate key keeps
// its first position and its last value, as nlohmann's parse does. InvalidArgument with nlohmann's
// message for a syntax error (invalid UTF-8 included), or "JSON nested deeper than N levels at byte B"
// (B: the 0-based offset of the bracket that opens level N + 1).
Result<nlohmann::ordered_json> parse_bounded_json(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace rill::text
