#include "server/openai/responses_request.h"

namespace rill::server {
namespace {

// A message item's content: a string, or a list of text parts (input_text, output_text, text, refusal).
ApiResult<std::string> item_text(const Json& content, const std::string& path) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    return bad_request(path, "{}: must be a string or a list of content parts, got {}", path,
                       json_type_phrase(content));
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string key = fmt::format("{}[{}]", path, i);
    if (!part.is_object())
      return bad_request(key, "{}: must be an object, got {}", key, json_type_phrase(part));
    FieldReader r(part, key + ".");
    const auto type = r.string("type");
    if (!r.ok()) return *r.error();
    if (!type) return bad_request(key + ".type", "{}.type: is required", key);
    if (*type == "input_text" || *type == "output_text" || *type == "text" || *type == "refusal") {
      const auto t = r.string(*type == "refusal" ? "refusal" : "text");
      if (!r.ok()) return *r.error();
      if (!t) return bad_request(key + ".text", "{}.text: is required", key);
      text += *t;
    } else if (*type == "input_image" || *type == "input_file" || *type == "input_audio") {
      return bad_request(key + ".type", "{}.type: '{}' is not supported: this model takes text only", key,
                         *type);
    } else {
      return bad_request(key + ".type", "{}.type: unknown content part type '{}'", key, *type);
    }
  }
  return text;
}

// input items -> chat messages. Consecutive function_call items (and a message right before them from the
// assistant) become one assistant message with tool_calls, as the chat API carries them.
std::optional<ApiError> input_messages(const Json& input, Json* messages) {
  if (input.is_string()) {
    messages->push_back(Json{{"role", "user"}, {"content", input.get<std::string>()}});
    return std::nullopt;
  }
  if (!input.is_array() || input.empty())
    return bad_request("input", "input: must be a string or a non-empty list of input items");
  for (size_t i = 0; i < input.size(); ++i) {
    const Json& item = input[i];
    const std::string path = fmt::format("input[{}]", i);
    if (!item.is_object())
      return bad_request(path, "{}: must be an object, got {}", path, json_type_phrase(item));
    FieldReader r(item, path + ".");
    const std::string type = r.string("type").value_or("message");
    if (!r.ok()) return r.error();
    if (type == "message") {
      const auto role = r.string("role");
      if (!r.ok()) return r.error();
      if (!role) return bad_request(path + ".role", "{}.role: is required", path);
      if (*role != "user" && *role != "system" && *role != "developer" && *role != "assistant")
        return bad_request(path + ".role", "{}.role: must be user, system, developer or assistant, got '{}'",
                           path, *role);
      const Json* content = r.any("content");
      if (!content) return bad_request(path + ".content", "{}.content: is required", path);
      RILL_API_ASSIGN_OR_RETURN(std::string text, item_text(*content, path + ".content"));
      messages->push_back(Json{{"role", *role}, {"content", std::move(text)}});
    } else if (type == "function_call") {
      const auto call_id = r.string("call_id"), name = r.string("name"), arguments = r.string("arguments");
      if (!r.ok()) return r.error();
      if (!call_id) return bad_request(path + ".call_id", "{}.call_id: is required", path);
      if (!name) return bad_request(path + ".name", "{}.name: is required", path);
      Json call{{"id", *call_id},
                {"type", "function"},
                {"function", {{"name", *name}, {"arguments", arguments.value_or("{}")}}}};
      Json* last = messages->empty() ? nullptr : &messages->back();
      if (last && (*last)["role"] == "assistant") {
        if (!last->contains("tool_calls")) (*last)["tool_calls"] = Json::array();
        (*last)["tool_calls"].push_back(std::move(call));
      } else {
        messages->push_back(
            Json{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", Json::array({call})}});
      }
    } else if (type == "function_call_output") {
      const auto call_id = r.string("call_id");
      const Json* output = r.any("output");
      if (!r.ok()) return r.error();
      if (!call_id) return bad_request(path + ".call_id", "{}.call_id: is required", path);
      if (!output) return bad_request(path + ".output", "{}.output: is required", path);
      RILL_API_ASSIGN_OR_RETURN(std::string text, item_text(*output, path + ".output"));
      messages->push_back(Json{{"role", "tool"}, {"tool_call_id", *call_id}, {"content", std::move(text)}});
    } else if (type == "reasoning") {
      continue;  // earlier turns' reasoning is not replayed (the chat templates drop it too)
    } else {
      return bad_request(path + ".type",
                         "{}.type: '{}' is not supported (message, function_call, function_call_output and "
                         "reasoning items are)",
                         path, type);
    }
  }
  return std::nullopt;
}

std::optional<ApiError> chat_tools(const Json& tools, Json* out) {
  if (!tools.is_array())
    return bad_request("tools", "tools: must be an array, got {}", json_type_phrase(tools));
  *out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string path = fmt::format("tools[{}]", i);
    if (!tools[i].is_object()) return bad_request(path, "{}: must be an object", path);
    FieldReader r(tools[i], path + ".");
    const auto type = r.string("type");
    if (!r.ok()) return r.error();
    if (type != "function")
      return bad_request(path + ".type", "{}.type: '{}' is not supported: only function tools are", path,
                         type.value_or(""));
    Json fn = Json::object();
    for (const char* key : {"name", "description", "parameters", "strict"})
      if (auto it = tools[i].find(key); it != tools[i].end() && !it->is_null()) fn[key] = *it;
    out->push_back(Json{{"type", "function"}, {"function", std::move(fn)}});
  }
  return std::nullopt;
}

std::optional<ApiError> chat_tool_choice(const Json& choice, Json* out) {
  if (choice.is_string()) {
    *out = choice;
    return std::nullopt;
  }
  if (!choice.is_object())
    return bad_request("tool_choice", "tool_choice: must be a string or an object, got {}",
                       json_type_phrase(choice));
  FieldReader r(choice, "tool_choice.");
  const auto type = r.string("type"), name = r.string("name");
  if (!r.ok()) return r.error();
  if (type != "function")
    return bad_request("tool_choice.type", "tool_choice.type: '{}' is not supported: only \"function\" is",
                       type.value_or(""));
  if (!name) return bad_request("tool_choice.name", "tool_choice.name: is required");
  *out = Json{{"type", "function"}, {"function", {{"name", *name}}}};
  return std::nullopt;
}

// text.format -> the chat API's response_format.
std::optional<ApiError> chat_response_format(const Json& text, Json* out) {
  if (!text.is_object())
    return bad_request("text", "text: must be an object, got {}", json_type_phrase(text));
  auto it = text.find("format");
  if (it == text.end() || it->is_null()) return std::nullopt;
  const Json& f = *it;
  if (!f.is_object()) return bad_request("text.format", "text.format: must be an object");
  FieldReader r(f, "text.format.");
  const auto type = r.string("type");
  if (!r.ok()) return r.error();
  if (type == "text" || type == "json_object") {
    *out = Json{{"type", *type}};
  } else if (type == "json_schema") {
    Json schema = Json::object();
    for (const char* key : {"name", "schema", "description", "strict"})
      if (auto k = f.find(key); k != f.end() && !k->is_null()) schema[key] = *k;
    *out = Json{{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  } else {
    return bad_request("text.format.type", "text.format.type: must be text, json_object or json_schema");
  }
  return std::nullopt;
}

}  // namespace

ApiResult<ResponsesRequest> parse_responses_request(const Json& body, const ParseLimits& limits) {
  if (!body.is_object()) return bad_request("", "the request body must be a JSON object");
  FieldReader r(body);
  for (const char* key : {"previous_response_id", "conversation"})
    if (r.any(key))
      return bad_request(key,
                         "{}: is not supported: rill stores no responses or conversations; send the whole "
                         "conversation as `input`",
                         key);
  if (auto background = r.boolean("background"); background && *background)
    return bad_request("background", "background: is not supported (responses are computed while you wait)");
  r.boolean("store");  // accepted either way: nothing is stored (the Response says "store": false)
  const auto instructions = r.string("instructions");
  const auto max_output_tokens = r.integer("max_output_tokens", 1, INT32_MAX);
  r.object("metadata");
  r.string("user");
  r.string("truncation");
  const Json* reasoning = r.object("reasoning");
  if (!r.ok()) return *r.error();
  const Json* input = r.any("input");
  if (!input) return bad_request("input", "input: is required");

  Json chat = Json::object();
  Json messages = Json::array();
  if (instructions) messages.push_back(Json{{"role", "system"}, {"content", *instructions}});
  RILL_API_TRY(input_messages(*input, &messages));
  chat["messages"] = std::move(messages);
  if (const Json* model = r.any("model")) chat["model"] = *model;
  if (const Json* tools = r.any("tools")) {
    Json converted;
    RILL_API_TRY(chat_tools(*tools, &converted));
    if (!converted.empty()) chat["tools"] = std::move(converted);
  }
  if (const Json* choice = r.any("tool_choice")) {
    Json converted;
    RILL_API_TRY(chat_tool_choice(*choice, &converted));
    chat["tool_choice"] = std::move(converted);
  }
  if (const Json* text = r.any("text")) {
    Json format;
    RILL_API_TRY(chat_response_format(*text, &format));
    if (!format.is_null()) chat["response_format"] = std::move(format);
  }
  if (reasoning)
    if (auto effort = reasoning->find("effort"); effort != reasoning->end() && !effort->is_null())
      chat["reasoning_effort"] = *effort;
  if (max_output_tokens) chat["max_tokens"] = *max_output_tokens;
  // Same meaning on both APIs (the Responses API's own and vLLM's extras).
  for (const char* key :
       {"temperature", "top_p", "parallel_tool_calls", "stream", "top_k", "min_p", "seed", "stop",
        "stop_token_ids", "presence_penalty", "frequency_penalty", "repetition_penalty", "min_tokens",
        "ignore_eos", "skip_special_tokens", "chat_template_kwargs", "thinking"})
    if (auto it = body.find(key); it != body.end() && !it->is_null()) chat[key] = *it;

  ResponsesRequest out;
  RILL_API_ASSIGN_OR_RETURN(out.chat, parse_chat_request(chat, limits));
  auto echoed = [&](const char* key, Json fallback) {
    auto it = body.find(key);
    return it == body.end() || it->is_null() ? fallback : *it;
  };
  out.echo = Json{
      {"instructions", echoed("instructions", nullptr)},
      {"max_output_tokens", echoed("max_output_tokens", nullptr)},
      {"temperature", echoed("temperature", 1.0)},
      {"top_p", echoed("top_p", 1.0)},
      {"tools", echoed("tools", Json::array())},
      {"tool_choice", echoed("tool_choice", "auto")},
      {"parallel_tool_calls", echoed("parallel_tool_calls", true)},
      {"text", echoed("text", Json{{"format", {{"type", "text"}}}})},
      {"reasoning",
       Json{{"effort", reasoning && reasoning->contains("effort") ? (*reasoning)["effort"] : Json()},
            {"summary", nullptr}}},
      {"metadata", echoed("metadata", Json::object())},
      {"user", echoed("user", nullptr)},
      {"truncation", echoed("truncation", "disabled")},
  };
  return out;
}

}  // namespace rill::server
