#include "text/k3/k3_renderer.h"

#include "text/k3/message_normalize.h"

namespace rill::text::k3 {
namespace {

constexpr std::string_view kToolDeclareHead =
    "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n";
constexpr std::string_view kDynamicDeclareHead =
    "## New Tools Available\nThe system dynamically extends the toolset via lazy-loading.\n"
    "You have access to all existing and extended tools.\nHere are the specs for the extended "
    "tools.\n\n```json\n";

// xtml_type / xtml_value of encoding_k3.py.
std::string_view xtml_type(const Json& v) {
  if (v.is_boolean()) return "boolean";
  if (v.is_null()) return "null";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_object()) return "object";
  return "array";
}
std::string xtml_value(const Json& v) {
  return v.is_string() ? v.get<std::string>() : python_json_dumps(v, JsonSeparators::Default, false);
}

class Renderer {
 public:
  explicit Renderer(const ChatOptions& options) : options_(options) {}

  Result<std::vector<Segment>> run(const Json& raw_messages, const Json& tools) {
    if (!raw_messages.is_array()) return invalid_argument("messages must be an array");
    Json messages = sort_tool_results(raw_messages);
    RILL_TRY(normalize_tool_calls(messages));

    if (python_truthy(tools)) tool_declare(tools, /*dynamic=*/false);
    if (options_.thinking) {
      w_.internal_system_message("thinking-effort",
                                 "`thinking_effort` guides on how much to think in your thinking channel "
                                 "(not including the response "
                                 "channel), supported values include `low`, `medium`, `high`, and "
                                 "`max`.\nNow the system is invoked with "
                                 "`thinking_effort=" +
                                     options_.thinking_effort + "`.");
    }
    for (size_t i = 0; i < messages.size(); ++i) RILL_TRY(message(messages[i], i));

    switch (options_.tool_choice) {
      case ToolChoice::Auto:
      case ToolChoice::Named:  // no form in the reference (its template compares with strings only)
        break;
      case ToolChoice::Required:
        w_.internal_system_message(
            "tool-choice",
            "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the "
            "next message.");
        break;
      case ToolChoice::None:
        w_.internal_system_message(
            "tool-choice",
            "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in "
            "the next message.");
        break;
    }
    constexpr std::string_view kRawJson =
        "Your response must be raw JSON data without markdown code blocks (```json) or any additional "
        "formatting.";
    switch (options_.response_format) {
      case ResponseFormat::Text:
        break;
      case ResponseFormat::JsonObject:
        w_.internal_system_message(
            "response-format",
            "The system is invoked with `response_format=json_object`.\n" + std::string(kRawJson));
        break;
      case ResponseFormat::JsonSchema:
        w_.internal_system_message(
            "response-format",
            "The system is invoked with `response_format=json_schema`.\n" + std::string(kRawJson) +
                "\nThe JSON data must match the following schema:\n```json\n" +
                python_json_dumps(options_.response_schema, JsonSeparators::Compact, true) + "\n```");
        break;
    }
    if (options_.add_generation_prompt) {
      w_.open_tag("message", {{"role", "assistant"}});
      w_.open_tag(options_.thinking ? "think" : "response");
    }
    return w_.take();
  }

 private:
  void tool_declare(const Json& tools, bool dynamic) {
    w_.open_tag("message", {{"role", "system"}, {"type", "tool-declare"}});
    w_.text(std::string(dynamic ? kDynamicDeclareHead : kToolDeclareHead) +
            python_json_dumps(tools, JsonSeparators::Compact, true) + "\n```");
    w_.close_tag("message");
    w_.end_of_msg();
  }

  // _append_text: str(value), nothing for "".
  Status text_value(const Json& value, const std::string& where) {
    auto s = python_str(value);
    if (!s.ok()) return invalid_argument("{}: {}", where, s.status().message());
    w_.text(*s);
    return {};
  }

  Status content(const Json& m, const std::string& where) {
    const auto it = m.find("content");
    if (it == m.end() || it->is_null()) return {};
    if (it->is_string()) {
      w_.text(it->get_ref<const std::string&>());
      return {};
    }
    if (!it->is_array())
      return invalid_argument("{}.content must be a string, an array of parts or null", where);
    for (size_t k = 0; k < it->size(); ++k) {
      const Json& part = (*it)[k];
      const std::string at = fmt::format("{}.content[{}]", where, k);
      if (!part.is_object()) return invalid_argument("{} must be an object", at);
      const Json type = part.value("type", Json());
      if (type == "image" || type == "image_url")
        return unimplemented("{}: images are not supported (text-only)", at);
      if (!part.contains("text")) return invalid_argument("{} has no text", at);
      RILL_TRY(text_value(part.at("text"), at + ".text"));
    }
    return {};
  }

  // [("role", role)] plus ("name", str(name)) when the message's name is truthy.
  Result<std::vector<Attr>> role_attrs(const Json& m, const char* role, const std::string& where) {
    std::vector<Attr> attrs = {{"role", role}};
    const Json name = m.value("name", Json());
    if (python_truthy(name)) {
      auto s = python_str(name);
      if (!s.ok()) return invalid_argument("{}.name: {}", where, s.status().message());
      attrs.emplace_back("name", *s);
    }
    return attrs;
  }

  Status message(const Json& m, size_t i) {
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) return invalid_argument("{} must be an object", where);
    const auto role_it = m.find("role");
    if (role_it == m.end()) return invalid_argument("{} has no role", where);
    const Json& role = *role_it;
    if (role == "user" || (role == "system" && !python_truthy(m.value("tools", Json())))) {
      RILL_ASSIGN_OR_RETURN(const auto attrs, role_attrs(m, role == "user" ? "user" : "system", where));
      w_.open_tag("message", attrs);
      RILL_TRY(content(m, where));
      w_.close_tag("message");
      w_.end_of_msg();
    } else if (role == "system") {
      tool_declare(m.at("tools"), /*dynamic=*/true);
    } else if (role == "tool") {
      RILL_TRY(tool_message(m, where));
    } else if (role == "assistant") {
      tool_calls_ = m.value("tool_calls", Json());
      tool_index_ = 0;
      RILL_ASSIGN_OR_RETURN(const auto attrs, role_attrs(m, "assistant", where));
      w_.open_tag("message", attrs);
      RILL_TRY(assistant_body(m, where));
      w_.close_tag("message");
      w_.end_of_msg();
    } else {
      return invalid_argument("{}.role {} is not one of system, user, assistant, tool", where, role.dump());
    }
    return {};
  }

  Status tool_message(const Json& m, const std::string& where) {
    ++tool_index_;
    Json name = m.contains("tool") ? m.at("tool") : m.value("name", Json());
    if (name.is_null() && tool_calls_.is_array() && tool_index_ <= tool_calls_.size()) {
      const Json& call = tool_calls_[tool_index_ - 1];
      const Json& fn = call.is_object() && call.contains("function") ? call.at("function") : call;
      if (fn.is_object()) name = fn.value("name", Json());
    }
    if (name.is_null()) {
      return invalid_argument(
          "{}: the tool message needs a resolvable tool name: carry `tool`/`name`, a "
          "`tool_call_id` of the preceding assistant's tool_calls, or match one by order",
          where);
    }
    auto name_str = python_str(name);
    if (!name_str.ok()) return invalid_argument("{}.tool: {}", where, name_str.status().message());
    w_.open_tag("message", {{"role", "tool"}, {"tool", *name_str}, {"index", std::to_string(tool_index_)}});
    RILL_TRY(content(m, where));
    w_.close_tag("message");
    w_.end_of_msg();
    return {};
  }

  Status assistant_body(const Json& m, const std::string& where) {
    if (options_.thinking) {
      Json reasoning = m.value("reasoning_content", Json());
      if (!python_truthy(reasoning)) reasoning = m.value("reasoning", Json());
      w_.open_tag("think");
      if (!reasoning.is_null()) {
        auto s = python_str(reasoning);
        if (!s.ok()) return invalid_argument("{}.reasoning_content: {}", where, s.status().message());
        if (!python_strip(*s).empty()) w_.text(*s);
      }
      w_.close_tag("think");
    }
    w_.open_tag("response");
    RILL_TRY(content(m, where));
    w_.close_tag("response");
    if (!python_truthy(tool_calls_)) return {};
    w_.open_tag("tools");
    for (size_t k = 0; k < tool_calls_.size(); ++k) {
      const std::string at = fmt::format("{}.tool_calls[{}]", where, k);
      const Json& call = tool_calls_[k];
      if (!call.is_object()) return invalid_argument("{} must be an object", at);
      const Json& fn = call.contains("function") ? call.at("function") : call;
      if (!fn.is_object() || !fn.contains("name") || fn.at("name").is_null()) {
        return invalid_argument("{} has no function name", at);
      }
      auto name = python_str(fn.at("name"));
      if (!name.ok()) return invalid_argument("{}.function.name: {}", at, name.status().message());
      w_.open_tag("call", {{"tool", *name}, {"index", std::to_string(k + 1)}});
      if (fn.contains("_xtml_json_block")) {
        w_.open_tag("json", {{"type", "object"}});
        RILL_TRY(text_value(fn.at("_xtml_json_block"), at));
        w_.close_tag("json");
      } else {
        for (const auto& [key, value] : fn.at("arguments").items()) {
          w_.open_tag("argument", {{"key", key}, {"type", std::string(xtml_type(value))}});
          w_.text(xtml_value(value));
          w_.close_tag("argument");
        }
      }
      w_.close_tag("call");
    }
    w_.close_tag("tools");
    return {};
  }

  const ChatOptions& options_;
  XtmlWriter w_;
  Json tool_calls_;  // of the latest assistant message (tool results resolve names against it)
  size_t tool_index_ = 0;
};

}  // namespace

Result<std::vector<Segment>> build_chat_segments(const Json& messages, const Json& tools,
                                                 const ChatOptions& options) {
  try {
    return Renderer(options).run(messages, tools);
  } catch (const nlohmann::json::exception& e) {
    // Every access above is checked; this keeps a missed case a Status, never an exception out of text/.
    return internal_error("rendering the K3 prompt: {}", e.what());
  }
}

Result<std::vector<int32_t>> encode_segments(const std::vector<Segment>& segments,
                                             const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (const Segment& s : segments) {
    if (s.allow_special) {
      const auto id = tokenizer.token_id(s.text);
      if (!id) {
        return invalid_argument(
            "the tokenizer has no special token '{}': Kimi K3 prompts need K3's "
            "tokenizer_config.json",
            s.text);
      }
      ids.push_back(*id);
    } else {
      tokenizer.encode_append(s.text, /*allow_special=*/false, ids);
    }
  }
  return ids;
}

Result<RenderedPrompt> render_chat(const Json& request, const Tokenizer& tokenizer) {
  RenderedPrompt out;
  RILL_ASSIGN_OR_RETURN(out.options, chat_options_from_request(request));
  const auto messages = request.find("messages");
  if (messages == request.end() || !messages->is_array() || messages->empty()) {
    return invalid_argument("messages must be a non-empty array");
  }
  RILL_TRY(validate_tools(request));
  RILL_ASSIGN_OR_RETURN(out.segments,
                        build_chat_segments(*messages, request.value("tools", Json()), out.options));
  for (const Segment& s : out.segments) out.text += s.text;
  RILL_ASSIGN_OR_RETURN(out.ids, encode_segments(out.segments, tokenizer));
  if (out.options.add_generation_prompt) {
    // The stub is the last open_tag: <|open|> think|response <|sep|>.
    const std::vector<Segment> stub(out.segments.end() - 3, out.segments.end());
    RILL_ASSIGN_OR_RETURN(const auto stub_ids, encode_segments(stub, tokenizer));
    out.n_generation_stub = static_cast<int32_t>(stub_ids.size());
  }
  return out;
}

}  // namespace rill::text::k3
