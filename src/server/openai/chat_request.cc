#include "server/openai/chat_request.h"

#include <set>

#include "server/openai/request_limits.h"

namespace rill::server {
namespace {

bool is_tool_name(const std::string& name) {
  if (name.empty() || name.size() > 256) return false;
  auto word = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!word(name[0])) return false;
  for (char c : name)
    if (!word(c) && !(c >= '0' && c <= '9') && c != '-') return false;
  return true;
}

// content: a string, or a list of {"type": "text", "text": ...} parts (images and audio are refused: the
// models served here are text-only).
void check_content(FieldReader& r, bool may_be_null) {
  const Json* content = r.any("content");
  if (!content) {
    if (!may_be_null) r.fail("content", "is required for this role");
    return;
  }
  if (content->is_string()) return;
  if (!content->is_array())
    return r.fail("content", "must be a string or a list of content parts, got {}",
                  json_type_phrase(*content));
  for (size_t i = 0; i < content->size(); ++i) {
    const Json& part = (*content)[i];
    const std::string key = fmt::format("content[{}]", i);
    if (!part.is_object()) return r.fail(key, "must be an object, got {}", json_type_phrase(part));
    FieldReader pr(part, r.name(key) + ".");
    const auto type = pr.string("type");
    if (!pr.ok()) return r.fail(*pr.error());
    if (!type) return r.fail(key + ".type", "is required");
    if (*type == "text" || *type == "refusal") {
      const char* field = *type == "text" ? "text" : "refusal";
      if (!pr.string(field) && pr.ok()) pr.fail(field, "is required");
      if (!pr.ok()) return r.fail(*pr.error());
    } else if (*type == "image_url" || *type == "input_audio" || *type == "file" || *type == "video_url") {
      return r.fail(key + ".type", "'{}' is not supported: this model takes text only", *type);
    } else {
      return r.fail(key + ".type", "unknown content part type '{}'", *type);
    }
  }
}

void check_tool_calls(FieldReader& r, const Json& calls, int* n_calls) {
  if (!calls.is_array()) return r.fail("tool_calls", "must be an array, got {}", json_type_phrase(calls));
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string key = fmt::format("tool_calls[{}]", i);
    if (!calls[i].is_object()) return r.fail(key, "must be an object");
    FieldReader cr(calls[i], r.name(key) + ".");
    cr.string("id");
    if (auto type = cr.string("type"); type && *type != "function") cr.fail("type", "must be \"function\"");
    const Json* fn = cr.object("function");
    if (cr.ok() && !fn) cr.fail("function", "is required");
    if (fn) {
      FieldReader fr(*fn, cr.name("function."));
      if (!fr.string("name") && fr.ok()) fr.fail("name", "is required");
      const Json* args = fr.any("arguments");
      if (args && !args->is_string() && !args->is_object())
        fr.fail("arguments", "must be a JSON string, got {}", json_type_phrase(*args));
      if (!fr.ok()) cr.fail(*fr.error());
    }
    if (!cr.ok()) return r.fail(*cr.error());
    ++*n_calls;
  }
}

std::optional<ApiError> check_messages(Json& messages, int* n_prior_tool_calls) {
  if (!messages.is_array() || messages.empty())
    return bad_request("messages", "messages: must be a non-empty array");
  for (size_t i = 0; i < messages.size(); ++i) {
    Json& m = messages[i];
    const std::string path = fmt::format("messages[{}]", i);
    if (!m.is_object()) return bad_request(path, "{}: must be an object, got {}", path, json_type_phrase(m));
    FieldReader r(m, path + ".");
    const auto role = r.string("role");
    if (!r.ok()) return r.error();
    if (!role) return bad_request(path + ".role", "{}.role: is required", path);
    r.string("name");
    if (*role == "developer") m["role"] = "system";  // OpenAI's newer name for the system role
    if (*role == "system" || *role == "developer" || *role == "user") {
      check_content(r, *role != "user" && r.any("tools"));  // K3 dynamic tools: a system message without text
    } else if (*role == "assistant") {
      const Json* calls = r.any("tool_calls");
      check_content(r, true);
      if (calls) check_tool_calls(r, *calls, n_prior_tool_calls);
      r.string("reasoning_content");
    } else if (*role == "tool") {
      check_content(r, false);
      if (!r.string("tool_call_id") && r.ok()) r.fail("tool_call_id", "is required for role tool");
    } else {
      return bad_request(path + ".role",
                         "{}.role: unknown role '{}' (expected system, developer, user, assistant or tool)",
                         path, *role);
    }
    if (!r.ok()) return r.error();
  }
  return std::nullopt;
}

// 413 naming `param`: a schema larger than its request_limits.h bound.
ApiError too_large(const std::string& param, const char* what, size_t bytes, size_t limit) {
  return ApiError{
      413, fmt::format("{}: {} is {} bytes as JSON, more than the {} allowed", param, what, bytes, limit),
      param, ""};
}

std::optional<ApiError> check_tools(const Json& tools, std::set<std::string>* names) {
  if (!tools.is_array())
    return bad_request("tools", "tools: must be an array, got {}", json_type_phrase(tools));
  if (tools.size() > kMaxTools)
    return bad_request("tools", "tools: at most {} tools, got {}", kMaxTools, tools.size());
  if (const size_t bytes = json_text_bytes(tools); bytes > kMaxToolsBytes)
    return too_large("tools", "the list of tools", bytes, kMaxToolsBytes);
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string path = fmt::format("tools[{}]", i);
    if (!tools[i].is_object()) return bad_request(path, "{}: must be an object", path);
    FieldReader r(tools[i], path + ".");
    const auto type = r.string("type");
    if (r.ok() && type != "function")
      return bad_request(path + ".type", "{}.type: must be \"function\"", path);
    const Json* fn = r.object("function");
    if (r.ok() && !fn) return bad_request(path + ".function", "{}.function: is required", path);
    if (!r.ok()) return r.error();
    FieldReader fr(*fn, path + ".function.");
    const auto name = fr.string("name");
    fr.string("description");
    const Json* parameters = fr.object("parameters");
    fr.boolean("strict");
    if (!fr.ok()) return fr.error();
    if (const size_t bytes = parameters ? json_text_bytes(*parameters) : 0; bytes > kMaxToolSchemaBytes)
      return too_large(path + ".function.parameters", "the schema", bytes, kMaxToolSchemaBytes);
    if (!name || !is_tool_name(*name))
      return bad_request(path + ".function.name",
                         "{}.function.name: must match ^[a-zA-Z_][a-zA-Z0-9_-]{{0,255}}$, got '{}'", path,
                         name.value_or(""));
    if (!names->insert(*name).second)
      return bad_request(path + ".function.name", "{}.function.name: duplicate tool name '{}'", path, *name);
  }
  return std::nullopt;
}

std::optional<ApiError> read_tool_choice(const Json& body, const std::set<std::string>& names,
                                         ChatRequest* out) {
  out->tool_choice = names.empty() ? ToolChoice::None : ToolChoice::Auto;
  auto it = body.find("tool_choice");
  if (it == body.end() || it->is_null()) return std::nullopt;
  const Json& tc = *it;
  if (tc.is_string()) {
    const std::string s = tc.get<std::string>();
    if (s == "none")
      out->tool_choice = ToolChoice::None;
    else if (s == "auto")
      out->tool_choice = names.empty() ? ToolChoice::None : ToolChoice::Auto;
    else if (s == "required")
      out->tool_choice = ToolChoice::Required;
    else
      return bad_request("tool_choice",
                         "tool_choice: must be none, auto, required or a named function, got '{}'", s);
  } else if (tc.is_object()) {
    FieldReader r(tc, "tool_choice.");
    if (r.string("type") != std::optional<std::string>("function") && r.ok())
      r.fail("type", "must be \"function\"");
    const Json* fn = r.object("function");
    std::optional<std::string> name;
    if (fn) {
      FieldReader fr(*fn, "tool_choice.function.");
      name = fr.string("name");
      if (!fr.ok()) r.fail(*fr.error());
    }
    if (!r.ok()) return r.error();
    if (!name) return bad_request("tool_choice", "tool_choice.function.name: is required");
    out->tool_choice = ToolChoice::Named;
    out->tool_choice_name = *name;
    if (!names.empty() && !names.count(*name))
      return bad_request("tool_choice", "tool_choice: names function '{}', which is not among the tools",
                         *name);
  } else {
    return bad_request("tool_choice", "tool_choice: must be a string or an object, got {}",
                       json_type_phrase(tc));
  }
  if ((out->tool_choice == ToolChoice::Required || out->tool_choice == ToolChoice::Named) && names.empty())
    return bad_request("tool_choice", "tool_choice: '{}' needs at least one tool in `tools`",
                       out->tool_choice == ToolChoice::Required ? "required" : out->tool_choice_name);
  return std::nullopt;
}

void read_response_format(FieldReader& r) {
  const Json* rf = r.object("response_format");
  if (!rf) return;
  FieldReader fr(*rf, "response_format.");
  const auto type = fr.string("type");
  if (fr.ok() && !type) fr.fail("type", "is required");
  if (fr.ok() && *type != "text" && *type != "json_object" && *type != "json_schema")
    fr.fail("type", "must be text, json_object or json_schema, got '{}'", *type);
  if (fr.ok() && *type == "json_schema") {
    const Json* js = fr.object("json_schema");
    if (fr.ok() && !js) fr.fail("json_schema", "is required when type is json_schema");
    if (js) {
      FieldReader sr(*js, "response_format.json_schema.");
      const auto name = sr.string("name");
      if (sr.ok() && (!name || name->empty())) sr.fail("name", "must be a non-empty string");
      const Json* schema = sr.object("schema");
      if (sr.ok() && !schema) sr.fail("schema", "is required (a JSON schema object)");
      if (const size_t bytes = schema ? json_text_bytes(*schema) : 0;
          sr.ok() && bytes > kMaxResponseSchemaBytes)
        sr.fail(
            too_large("response_format.json_schema.schema", "the schema", bytes, kMaxResponseSchemaBytes));
      sr.string("description");
      sr.boolean("strict");
      if (!sr.ok()) fr.fail(*sr.error());
    }
  }
  if (!fr.ok()) r.fail(*fr.error());
}

}  // namespace

ApiResult<ChatRequest> parse_chat_request(const Json& body, const ParseLimits& limits) {
  if (!body.is_object()) return bad_request("", "the request body must be a JSON object");
  ChatRequest out;
  out.body = body;
  FieldReader r(out.body);
  if (auto model = r.string("model")) out.model = *model;
  if (!r.any("messages")) return bad_request("messages", "messages: is required");
  RILL_API_TRY(check_messages(out.body["messages"], &out.n_prior_tool_calls));

  std::set<std::string> names;
  if (const Json* tools = r.any("tools")) RILL_API_TRY(check_tools(*tools, &names));
  out.n_tools = int(names.size());
  RILL_API_TRY(read_tool_choice(out.body, names, &out));
  r.boolean("parallel_tool_calls");
  read_response_format(r);

  read_sampling_fields(r, limits, &out.sampling);
  if (auto v = r.integer("max_tokens", 1, INT32_MAX)) out.sampling.max_tokens = *v;
  if (auto v = r.integer("max_completion_tokens", 1, INT32_MAX)) out.sampling.max_tokens = *v;
  if (auto v = r.boolean("logprobs")) out.logprobs = *v;
  if (auto v = r.integer("top_logprobs", 0, limits.max_logprobs)) {
    if (!out.logprobs) r.fail("top_logprobs", "requires logprobs to be true");
    out.top_logprobs = int(*v);
  }
  out.sampling.params.logprobs = out.logprobs ? out.top_logprobs : -1;

  r.object("chat_template_kwargs");
  r.object("thinking");
  r.string("reasoning_effort");
  r.boolean("add_generation_prompt");
  if (auto v = r.boolean("echo"); v && *v) r.fail("echo", "is not supported on chat completions");
  if (!r.ok()) return *r.error();
  return out;
}

}  // namespace rill::server
