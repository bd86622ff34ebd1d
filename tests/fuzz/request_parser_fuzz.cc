// Request bytes -> the bounded JSON parser -> the OpenAI completions and chat request parsers (every field
// check) -> for a valid chat request, what both renderer families do to it before any model is involved:
// the K2 template variables (both message normalisations) as Jinja values and `tojson` text, and the K3
// passes (tool-call arguments, tool-result order, tool checks). No input may crash, throw or hit UB.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/openai/chat_request.h"
#include "server/openai/completion_request.h"
#include "text/chat/chat_request.h"
#include "text/jinja/error.h"
#include "text/jinja/json.h"
#include "text/json/bounded_json.h"
#include "text/k3/message_normalize.h"

namespace {

using rill::server::Json;

void render_k2_variables(const Json& body) {
  const rill::text::SpecialTokens tokens{"<s>", "</s>", "<unk>", ""};
  for (const bool vllm_style : {false, true}) {
    rill::text::ChatNormalization normalization;
    normalization.parse_tool_arguments = vllm_style;
    normalization.template_handles_content_parts = !vllm_style;
    auto vars = rill::text::chat_template_variables(body, tokens, normalization);
    if (!vars.ok()) continue;
    try {
      const auto value = rill::text::jinja::from_json(*vars);
      (void)rill::text::jinja::dumps(value, {});
    } catch (const rill::text::jinja::Error&) {  // from_json: integers beyond int64 (documented)
    }
  }
}

void normalize_k3(const Json& body) {
  (void)rill::text::k3::validate_tools(body);
  Json messages = body.at("messages");
  if (rill::text::k3::normalize_tool_calls(messages).ok()) (void)rill::text::k3::sort_tool_results(messages);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto body = rill::text::parse_bounded_json(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!body.ok()) return 0;
  const rill::server::ParseLimits limits{1280, 16, 20};
  (void)rill::server::parse_completion_request(*body, limits);
  auto chat = rill::server::parse_chat_request(*body, limits);
  if (!chat.ok()) return 0;
  render_k2_variables(chat->body);
  normalize_k3(chat->body);
  (void)chat->body.dump(-1, ' ', false, Json::error_handler_t::replace);  // as error messages and logs do
  return 0;
}
