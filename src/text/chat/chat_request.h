// From an OpenAI chat-completions request to the variables a Hugging Face chat template renders with, the
// way vLLM's chat path hands them to transformers' apply_chat_template (README.md "Request -> variables").
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace rill::text {

// The tokenizer's special tokens, which transformers passes to every template (bos_token, eos_token, ...).
// Empty strings are not passed.
struct SpecialTokens {
  std::string bos, eos, unk, pad;
  nlohmann::ordered_json additional = nlohmann::ordered_json::array();  // additional_special_tokens
};

struct ChatNormalization {
  // vLLM json-parses tool_calls[].function.arguments into objects. rill keeps the string the client sent
  // (the model's own output) unless this is set: templates print a string verbatim, while a parsed
  // object would be re-serialised (K2-Thinking: `| tojson` with ", " separators) and break templates that
  // concatenate the arguments as text (DeepSeek).
  bool parse_tool_arguments = false;
  // The template iterates over content-part lists (vLLM's "openai" content format). When it does not
  // ("string" format), a list of text parts is joined with "\n" into one string, as vLLM does; other
  // parts (images, audio) are refused since such a template cannot show them.
  bool template_handles_content_parts = true;
};

// messages, tools (null when absent), documents (null when absent), add_generation_prompt (default true),
// reasoning_effort (null when absent), the special tokens, then chat_template_kwargs on top of all of
// them. Fails, naming the request field, on malformed input and on what rill does not support
// (continue_final_message, a request-supplied chat_template, kwargs that replace `messages`).
Result<nlohmann::ordered_json> chat_template_variables(const nlohmann::ordered_json& request,
                                                       const SpecialTokens& tokens,
                                                       const ChatNormalization& normalization);

}  // namespace rill::text
