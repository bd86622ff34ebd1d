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
// Values (scalars, arrays and objects) in one document: what a parse may allocate is bounded whatever the
// text's size (a value costs 16 bytes and up; a 1M-token prompt of ids is 1M values).
inline constexpr size_t kMaxJsonValues = size_t(1) << 21;

// Parses all of `text` (trailing non-space is an error), keeping object key order; a duplicate key keeps
// its first position and its last value, as nlohmann's parse does. InvalidArgument with nlohmann's
// message for a syntax error (invalid UTF-8 included), or "JSON nested deeper than N levels at byte B"
// (B: the 0-based offset of the bracket that opens level N + 1), or "JSON with more than N values".
Result<nlohmann::ordered_json> parse_bounded_json(std::string_view text, int max_depth = kMaxJsonDepth,
                                                  size_t max_values = kMaxJsonValues);

}  // namespace rill::text
