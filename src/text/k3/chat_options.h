// What an OpenAI chat request asks of the K3 renderer, resolved and validated (serving.md §2.6): thinking on
// or off and its effort, tool_choice, response_format, add_generation_prompt.
#pragma once

#include <string>

#include "core/status.h"
#include "text/k3/python_json.h"

namespace rill::text::k3 {

enum class ToolChoice { Auto, Required, None, Named };
enum class ResponseFormat { Text, JsonObject, JsonSchema };

struct ChatOptions {
  bool thinking = true;
  std::string thinking_effort = "max";  // low | high | max
  bool add_generation_prompt = true;
  ToolChoice tool_choice = ToolChoice::Auto;  // Required/None render a system message (only when tools exist)
  std::string tool_choice_name;               // Named: the function (rendered as Auto: K3 has no form for it)
  ResponseFormat response_format = ResponseFormat::Text;
  Json response_schema;  // the schema rendered for JsonSchema
};

// Precedence (explicit template kwargs win, as in trtllm-serve's K3 extension and vLLM's port):
//   thinking: chat_template_kwargs.thinking > chat_template_kwargs.enable_thinking > thinking.type
//             ("enabled" | "disabled") > reasoning_effort == "none" (off) > on.
//   effort:   chat_template_kwargs.thinking_effort > thinking.effort > reasoning_effort > "max";
//             reasoning_effort "medium" keeps the default (K3 has no medium); accepted: low | high | max.
//   tool_choice: "auto" | "none" | "required" | {"type": "function", "function": {"name": ...}};
//             "required" or a named function without any tool (request-level or dynamic) is an error. The
//             reference renders no message for a named function (the template only knows required/none):
//             the prompt is auto's, and the call is forced by the turn grammar (turn_grammar.h).
//   response_format: {"type": "text" | "json_object" | "json_schema"}; json_schema needs a non-empty
//             string `name`, an object `schema` and a boolean `strict` if present.
// Errors name the request parameter.
Result<ChatOptions> chat_options_from_request(const Json& request);

}  // namespace rill::text::k3
