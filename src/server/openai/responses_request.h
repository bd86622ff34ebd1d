// POST /v1/responses: the subset of OpenAI's Responses API that the official clients send, turned into a
// chat request (the same rendering, parsers, grammars and limits as /v1/chat/completions). Supported:
// model; input as a string or a list of items (messages with string or input_text / output_text parts,
// function_call and function_call_output items; reasoning items are dropped); instructions (a system
// message first); max_output_tokens; temperature; top_p; tools (function tools: {type, name, description,
// parameters, strict}); tool_choice (none | auto | required | {type: "function", name}); parallel_tool_calls;
// text.format (text | json_object | json_schema); reasoning.effort (K3: "none" turns thinking off, as
// reasoning_effort does on chat); stream; store (accepted; nothing is stored); metadata, user, truncation
// (echoed); vLLM's and Moonshot's extras (top_k, min_p, seed, stop, ..., thinking, chat_template_kwargs).
// Refused with a 400 naming the field: previous_response_id and conversation (nothing is stored: send the
// whole conversation), background, non-function tools, image / file / audio inputs, item_reference.
#pragma once

#include <string>

#include "server/openai/chat_request.h"

namespace rill::server {

struct ResponsesRequest {
  ChatRequest chat;  // the input rendered as chat messages, parsed by parse_chat_request
  // What the Response object repeats: instructions, max_output_tokens, temperature, top_p, tools,
  // tool_choice, parallel_tool_calls, text, reasoning, metadata, user, truncation (each as sent, or its
  // default).
  Json echo;
};

ApiResult<ResponsesRequest> parse_responses_request(const Json& body, const ParseLimits& limits);

}  // namespace rill::server
