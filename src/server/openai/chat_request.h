// POST /v1/chat/completions: the request parsed and validated before anything is rendered or admitted.
// What the chat template or the K3 renderer reads (messages, tools, tool_choice, response_format,
// chat_template_kwargs, thinking, reasoning_effort) stays in `body`; the rest becomes typed fields.
#pragma once

#include <string>

#include "server/openai/sampling_request.h"

namespace rill::server {

enum class ToolChoice { None, Auto, Required, Named };

struct ChatRequest {
  Json body;          // the request with messages normalised (role "developer" -> "system")
  std::string model;  // "" when absent
  SamplingRequest sampling;
  bool logprobs = false;
  int top_logprobs = 0;
  ToolChoice tool_choice = ToolChoice::None;  // default: auto with tools, none without
  std::string tool_choice_name;               // ToolChoice::Named
  int n_tools = 0;
  int n_prior_tool_calls = 0;  // tool calls of earlier assistant turns (ids stay unique across turns)
};

// Checks, each a 400 naming the field: messages (non-empty array of objects; roles system, developer,
// user, assistant, tool; content a string or a list of text parts, null only for assistants; tool messages
// need tool_call_id; assistant tool_calls well-formed), tools (type "function", name
// ^[a-zA-Z_][a-zA-Z0-9_-]{0,255}$, unique, parameters an object; count and schema bytes bounded by
// request_limits.h, the bytes a 413), tool_choice (none | auto | required |
// {"type": "function", "function": {"name"}} naming a declared tool; required/named need tools),
// response_format (text | json_object | json_schema with a non-empty name, an object schema of at most
// kMaxResponseSchemaBytes (else 413), a boolean strict), logprobs / top_logprobs (<= max_logprobs, only with
// logprobs), max_tokens / max_completion_tokens (>= 1), chat_template_kwargs (object), echo (false only:
// vLLM's chat echo is not implemented), the shared sampling fields.
ApiResult<ChatRequest> parse_chat_request(const Json& body, const ParseLimits& limits);

}  // namespace rill::server
