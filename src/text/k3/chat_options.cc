#include "text/k3/chat_options.h"

namespace rill::text::k3 {
namespace {

bool valid_effort(const std::string& e) {
  return e == "low" || e == "high" || e == "max";
}

// A present, non-null field of an object, or nullptr.
const Json* field(const Json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

Status resolve_thinking(const Json& request, const Json* kwargs, ChatOptions& o) {
  const Json* thinking_obj = field(request, "thinking");
  if (thinking_obj && !thinking_obj->is_object()) return invalid_argument("thinking must be an object");
  const Json* reasoning_effort = field(request, "reasoning_effort");
  if (reasoning_effort && !reasoning_effort->is_string())
    return invalid_argument("reasoning_effort must be a string");
  const std::string reasoning = reasoning_effort ? reasoning_effort->get<std::string>() : "";

  if (const Json* t = kwargs ? field(*kwargs, "thinking") : nullptr) {
    if (!t->is_boolean()) return invalid_argument("chat_template_kwargs.thinking must be a boolean");
    o.thinking = t->get<bool>();
  } else if (const Json* e = kwargs ? field(*kwargs, "enable_thinking") : nullptr) {
    if (!e->is_boolean()) return invalid_argument("chat_template_kwargs.enable_thinking must be a boolean");
    o.thinking = e->get<bool>();
  } else if (const Json* type = thinking_obj ? field(*thinking_obj, "type") : nullptr) {
    if (*type == "enabled") {
      o.thinking = true;
    } else if (*type == "disabled") {
      o.thinking = false;
    } else {
      return invalid_argument("thinking.type must be \"enabled\" or \"disabled\", got {}", type->dump());
    }
  } else if (reasoning == "none") {
    o.thinking = false;
  }

  if (const Json* e = kwargs ? field(*kwargs, "thinking_effort") : nullptr) {
    if (!e->is_string() || !valid_effort(e->get<std::string>())) {
      return invalid_argument("chat_template_kwargs.thinking_effort must be one of low, high, max; got {}",
                              e->dump());
    }
    o.thinking_effort = e->get<std::string>();
  } else if (const Json* e = thinking_obj ? field(*thinking_obj, "effort") : nullptr) {
    if (!e->is_string() || !valid_effort(e->get<std::string>())) {
      return invalid_argument("thinking.effort must be one of low, high, max; got {}", e->dump());
    }
    o.thinking_effort = e->get<std::string>();
  } else if (!reasoning.empty() && reasoning != "none" && reasoning != "medium") {
    if (!valid_effort(reasoning)) {
      return invalid_argument("reasoning_effort must be one of none, low, medium, high, max; got \"{}\"",
                              reasoning);
    }
    o.thinking_effort = reasoning;
  }
  return {};
}

bool has_any_tools(const Json& request) {
  if (const Json* tools = field(request, "tools"); tools && tools->is_array() && !tools->empty()) return true;
  if (const Json* messages = field(request, "messages"); messages && messages->is_array()) {
    for (const Json& m : *messages) {
      if (m.is_object() && m.value("role", Json()) == "system" && python_truthy(m.value("tools", Json())))
        return true;
    }
  }
  return false;
}

Status resolve_tool_choice(const Json& request, ChatOptions& o) {
  const Json* choice = field(request, "tool_choice");
  if (!choice) return {};
  if (choice->is_object()) {
    const Json* fn = field(*choice, "function");
    const Json* name = fn ? field(*fn, "name") : nullptr;
    if (!name || !name->is_string() || name->get_ref<const std::string&>().empty())
      return invalid_argument("tool_choice.function.name must be a non-empty string");
    if (!has_any_tools(request))
      return invalid_argument("tool_choice names a function, but there are no tools");
    o.tool_choice = ToolChoice::Named;
    o.tool_choice_name = name->get<std::string>();
    return {};
  }
  if (*choice == "auto") return {};
  if (*choice == "required") {
    if (!has_any_tools(request)) return invalid_argument("tool_choice \"required\" needs at least one tool");
    o.tool_choice = ToolChoice::Required;
    return {};
  }
  if (*choice == "none") {
    // The reference only tells the model "none" when there are tools to refrain from.
    if (has_any_tools(request)) o.tool_choice = ToolChoice::None;
    return {};
  }
  return invalid_argument("tool_choice must be \"auto\", \"none\" or \"required\", got {}", choice->dump());
}

Status resolve_response_format(const Json& request, const Json* kwargs, ChatOptions& o) {
  const Json* rf = field(request, "response_format");
  if (rf) {
    if (!rf->is_object()) return invalid_argument("response_format must be an object");
    const Json* type = field(*rf, "type");
    if (!type) {
      return invalid_argument("response_format.type is required");
    } else if (*type == "text") {
      // plain text: nothing to render
    } else if (*type == "json_object") {
      o.response_format = ResponseFormat::JsonObject;
    } else if (*type == "json_schema") {
      const Json* js = field(*rf, "json_schema");
      if (!js || !js->is_object()) return invalid_argument("response_format.json_schema must be an object");
      const Json* name = field(*js, "name");
      if (!name || !name->is_string() || name->get_ref<const std::string&>().empty()) {
        return invalid_argument("response_format.json_schema.name must be a non-empty string");
      }
      const Json* schema = field(*js, "schema");
      if (!schema || !schema->is_object()) {
        return invalid_argument("response_format.json_schema.schema must be an object");
      }
      if (const Json* strict = field(*js, "strict"); strict && !strict->is_boolean()) {
        return invalid_argument("response_format.json_schema.strict must be a boolean");
      }
      o.response_format = ResponseFormat::JsonSchema;
      o.response_schema = *schema;
    } else {
      return invalid_argument("response_format.type must be text, json_object or json_schema; got {}",
                              type->dump());
    }
  }
  // An explicit template kwarg replaces the schema (encoding_k3.py: "response_schema" wins).
  if (const Json* schema = kwargs ? field(*kwargs, "response_schema") : nullptr) o.response_schema = *schema;
  return {};
}

}  // namespace

Result<ChatOptions> chat_options_from_request(const Json& request) {
  if (!request.is_object()) return invalid_argument("the chat request must be a JSON object");
  ChatOptions o;
  const Json* kwargs = field(request, "chat_template_kwargs");
  if (kwargs && !kwargs->is_object()) return invalid_argument("chat_template_kwargs must be an object");
  RILL_TRY(resolve_thinking(request, kwargs, o));
  RILL_TRY(resolve_tool_choice(request, o));
  RILL_TRY(resolve_response_format(request, kwargs, o));
  if (const Json* agp = field(request, "add_generation_prompt")) {
    if (!agp->is_boolean()) return invalid_argument("add_generation_prompt must be a boolean");
    o.add_generation_prompt = agp->get<bool>();
  }
  return o;
}

}  // namespace rill::text::k3
