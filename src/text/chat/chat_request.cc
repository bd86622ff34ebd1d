#include "text/chat/chat_request.h"

#include "text/json/bounded_json.h"

namespace rill::text {
namespace {

using Json = nlohmann::ordered_json;

bool is_text_part(const Json& part) {
  if (!part.is_object()) return false;
  auto type = part.find("type"), text = part.find("text");
  return type != part.end() && *type == "text" && text != part.end() && text->is_string();
}

// vLLM's "string" content format: text parts joined with "\n".
Result<Json> flatten_parts(const Json& parts, size_t message_index) {
  std::string text;
  for (size_t j = 0; j < parts.size(); ++j) {
    if (!is_text_part(parts[j])) {
      const bool typed = parts[j].is_object() && parts[j].contains("type") && parts[j]["type"].is_string();
      const std::string type = typed ? parts[j]["type"].get<std::string>() : "?";
      return invalid_argument(
          "messages[{}].content[{}]: a '{}' part cannot be rendered: this model's chat template only renders "
          "text content",
          message_index, j, type);
    }
    if (j) text += "\n";
    text += parts[j]["text"].get<std::string>();
  }
  return Json(text);
}

// vLLM's _postprocess_messages: assistant tool-call arguments become objects; an empty tool_calls list is
// dropped so templates take the plain assistant path.
Status parse_arguments(Json& message, size_t message_index) {
  if (!message.contains("role") || message["role"] != "assistant") return Status::ok_status();
  if (!message.contains("tool_calls") || !message["tool_calls"].is_array()) return Status::ok_status();
  if (message["tool_calls"].empty()) {
    message.erase("tool_calls");
    return Status::ok_status();
  }
  Json& calls = message["tool_calls"];
  for (size_t j = 0; j < calls.size(); ++j) {
    if (!calls[j].is_object() || !calls[j].contains("function") || !calls[j]["function"].is_object())
      continue;
    Json& function = calls[j]["function"];
    Json& args = function["arguments"];
    // vLLM: a missing or empty arguments value becomes {}; a string is json.loads'ed.
    if (args.is_null() || (args.is_string() && args.get<std::string>().empty())) {
      args = Json::object();
    } else if (args.is_string()) {
      auto parsed = parse_bounded_json(args.get<std::string>());
      if (!parsed.ok()) {
        return invalid_argument("messages[{}].tool_calls[{}].function.arguments is not valid JSON: {}",
                                message_index, j, parsed.status().message());
      }
      args = std::move(parsed).value();
    }
  }
  return Status::ok_status();
}

Result<Json> normalize_messages(const Json& messages, const ChatNormalization& n) {
  if (!messages.is_array()) return invalid_argument("'messages' must be an array");
  Json out = Json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_object()) return invalid_argument("messages[{}] must be an object", i);
    Json message = messages[i];
    if (!n.template_handles_content_parts && message.contains("content") && message["content"].is_array()) {
      RILL_ASSIGN_OR_RETURN(message["content"], flatten_parts(message["content"], i));
    }
    if (n.parse_tool_arguments) RILL_TRY(parse_arguments(message, i));
    out.push_back(std::move(message));
  }
  return out;
}

// request[key], or `fallback` when absent (nlohmann's value() would throw on a type mismatch).
Json field(const Json& request, const char* key, Json fallback = Json()) {
  auto it = request.find(key);
  return it == request.end() ? std::move(fallback) : *it;
}

// vars[name] = value unless chat_template_kwargs set it (kwargs win, as in vLLM).
void set_default(Json& vars, const char* name, Json value) {
  if (!vars.contains(name)) vars[name] = std::move(value);
}

void set_token(Json& vars, const char* name, const std::string& value) {
  if (!value.empty()) set_default(vars, name, value);
}

}  // namespace

Result<Json> chat_template_variables(const Json& request, const SpecialTokens& tokens,
                                     const ChatNormalization& n) {
  if (!request.is_object()) return invalid_argument("the chat request must be a JSON object");
  if (!request.contains("messages")) return invalid_argument("the chat request has no 'messages'");
  if (!field(request, "chat_template").is_null()) {
    return invalid_argument(
        "'chat_template' in a request is not supported: the checkpoint's template is used");
  }
  const Json cont = field(request, "continue_final_message", Json(false));
  if (!cont.is_boolean()) return invalid_argument("'continue_final_message' must be a boolean");
  if (cont.get<bool>()) return unimplemented("'continue_final_message' is not supported");
  Json kwargs = field(request, "chat_template_kwargs", Json::object());
  if (kwargs.is_null()) kwargs = Json::object();
  if (!kwargs.is_object()) return invalid_argument("'chat_template_kwargs' must be an object");
  if (kwargs.contains("messages"))
    return invalid_argument("'chat_template_kwargs' cannot replace 'messages'");

  // The kwargs first, then the few variables they do not set: assigning the kwargs one by one would scan
  // ordered_json's key vector once per key (quadratic in a request's 100k kwargs).
  Json vars = std::move(kwargs);
  RILL_ASSIGN_OR_RETURN(vars["messages"], normalize_messages(request["messages"], n));
  set_default(vars, "tools", field(request, "tools"));
  set_default(vars, "documents", field(request, "documents"));
  const Json add = field(request, "add_generation_prompt", Json(true));
  if (!add.is_boolean()) return invalid_argument("'add_generation_prompt' must be a boolean");
  set_default(vars, "add_generation_prompt", add);
  set_default(vars, "reasoning_effort", field(request, "reasoning_effort"));
  set_token(vars, "bos_token", tokens.bos);
  set_token(vars, "eos_token", tokens.eos);
  set_token(vars, "unk_token", tokens.unk);
  set_token(vars, "pad_token", tokens.pad);
  if (!tokens.additional.empty()) set_default(vars, "additional_special_tokens", tokens.additional);
  return vars;
}

}  // namespace rill::text
