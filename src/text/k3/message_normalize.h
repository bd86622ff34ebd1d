// encoding_k3.py's normalisation passes, applied to a copy of the messages before rendering.
#pragma once

#include "core/status.h"
#include "text/k3/python_json.h"

namespace rill::text::k3 {

// normalize_xtml_tool_result_messages: each run of consecutive tool messages whose every tool_call_id
// matches a tool_calls[].id of the latest assistant is sorted into call order, and each matched message's
// `tool` (and `name`, if present) becomes the call's function name. Runs with an unmatched id stay as sent.
Json sort_tool_results(const Json& messages);

// normalize_conversation: tool-call `arguments` become an object. A JSON-object string is parsed; an
// unparseable string is kept as `_xtml_json_block` (rendered raw); null or blank is {}. A string holding
// JSON that is not an object, or arguments of another type, is an error.
Status normalize_tool_calls(Json& messages);

// K3's request checks (serving.md §2.6): tools (request-level or dynamic, i.e. on a content-less system
// message) are {"type": "function", "function": {"name": ^[a-zA-Z_][a-zA-Z0-9_-]{0,255}$, ...}}, names are
// unique across both, and only system messages carry tools.
Status validate_tools(const Json& request);

}  // namespace rill::text::k3
