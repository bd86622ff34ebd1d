#include "text/k3/message_normalize.h"

#include "text/json/bounded_json.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace rill::text::k3 {
namespace {

struct CallRef {
  size_t position;  // 1-based, every entry of tool_calls counts
  Json name;
};

// _tool_call_id_index: str(tool_calls[].id) -> (position, function name); the first of duplicate ids wins.
std::map<std::string, CallRef> call_index(const Json& tool_calls) {
  std::map<std::string, CallRef> index;
  if (!tool_calls.is_array()) return index;
  for (size_t i = 0; i < tool_calls.size(); ++i) {
    const Json& call = tool_calls[i];
    if (!call.is_object()) continue;
    const auto id = call.find("id");
    if (id == call.end() || id->is_null()) continue;
    auto key = python_str(*id);
    if (!key.ok() || index.count(*key)) continue;
    const auto fn = call.find("function");
    Json name = fn != call.end() && fn->is_object() ? fn->value("name", Json()) : call.value("name", Json());
    index.emplace(*key, CallRef{i + 1, std::move(name)});
  }
  return index;
}

bool is_tool_message(const Json& m) {
  return m.is_object() && m.value("role", Json()) == "tool";
}

// normalize_tool_arguments on one mapping that holds `arguments`.
Status normalize_arguments(Json& holder, const std::string& where) {
  const auto it = holder.find("arguments");
  Json args = it == holder.end() ? Json() : *it;
  std::optional<std::string> json_block;
  if (args.is_null()) {
    args = Json::object();
  } else if (args.is_string()) {
    const std::string raw = args.get<std::string>();
    if (python_strip(raw).empty()) {
      args = Json::object();
    } else {
      auto parsed = parse_bounded_json(raw);
      if (!parsed.ok()) {
        args = Json::object();
        json_block = raw;
      } else if (!parsed->is_object()) {
        return invalid_argument("{}.arguments must be a JSON object, got {}", where, parsed->type_name());
      } else {
        args = std::move(parsed).value();
      }
    }
  } else if (!args.is_object()) {
    return invalid_argument("{}.arguments must be an object or a JSON object string, got {}", where,
                            args.type_name());
  }
  holder["arguments"] = std::move(args);
  if (json_block) {
    holder["_xtml_json_block"] = *json_block;
  } else {
    holder.erase("_xtml_json_block");
  }
  return {};
}

bool valid_tool_name(const std::string& name) {
  if (name.empty() || name.size() > 256) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool more = (c >= '0' && c <= '9') || c == '-';
    if (!(alpha || (i > 0 && more))) return false;
  }
  return true;
}

Status check_tool_list(const Json& tools, const std::string& where, std::set<std::string>& names) {
  if (!tools.is_array()) return invalid_argument("{} must be an array", where);
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    const std::string at = fmt::format("{}[{}]", where, i);
    if (!tool.is_object()) return invalid_argument("{} must be an object", at);
    if (tool.value("type", Json()) != "function") return invalid_argument("{}.type must be \"function\"", at);
    const auto fn = tool.find("function");
    if (fn == tool.end() || !fn->is_object()) return invalid_argument("{}.function must be an object", at);
    const Json name = fn->value("name", Json());
    if (!name.is_string() || !valid_tool_name(name.get<std::string>())) {
      return invalid_argument("{}.function.name must match ^[a-zA-Z_][a-zA-Z0-9_-]{{0,255}}$, got {}", at,
                              name.dump());
    }
    if (!names.insert(name.get<std::string>()).second) {
      return invalid_argument("{}: duplicate tool name \"{}\"", at, name.get<std::string>());
    }
  }
  return {};
}

}  // namespace

Json sort_tool_results(const Json& messages) {
  if (!messages.is_array()) return messages;
  Json out = Json::array();
  std::map<std::string, CallRef> current;
  for (size_t i = 0; i < messages.size();) {
    const Json& m = messages[i];
    if (m.is_object() && m.value("role", Json()) == "assistant") {
      const Json calls = m.value("tool_calls", Json());
      current = python_truthy(calls) ? call_index(calls) : std::map<std::string, CallRef>{};
      out.push_back(m);
      ++i;
      continue;
    }
    if (!is_tool_message(m)) {
      out.push_back(m);
      ++i;
      continue;
    }
    struct Item {
      size_t position, offset;
      const Json* message;
      const CallRef* ref;
    };
    std::vector<Item> run;
    bool unresolved = false;
    for (size_t offset = 0; i < messages.size() && is_tool_message(messages[i]); ++i, ++offset) {
      const Json& t = messages[i];
      Json call_id = t.contains("tool_call_id") ? t.at("tool_call_id") : t.value("id", Json());
      const CallRef* ref = nullptr;
      if (!call_id.is_null()) {
        if (auto key = python_str(call_id); key.ok()) {
          const auto it = current.find(*key);
          if (it != current.end()) ref = &it->second;
        }
      }
      if (!ref) unresolved = true;
      run.push_back({ref ? ref->position : 0, offset, &t, ref});
    }
    if (!unresolved) {
      std::stable_sort(run.begin(), run.end(),
                       [](const Item& a, const Item& b) { return a.position < b.position; });
    }
    for (const Item& item : run) {
      if (unresolved || item.ref->name.is_null()) {
        out.push_back(*item.message);
        continue;
      }
      Json resolved = *item.message;
      resolved["tool"] = item.ref->name;
      if (resolved.contains("name")) resolved["name"] = item.ref->name;
      out.push_back(std::move(resolved));
    }
  }
  return out;
}

Status normalize_tool_calls(Json& messages) {
  if (!messages.is_array()) return {};
  for (size_t i = 0; i < messages.size(); ++i) {
    Json& m = messages[i];
    if (!m.is_object() || !m.contains("tool_calls") || !python_truthy(m["tool_calls"])) continue;
    Json& calls = m["tool_calls"];
    if (!calls.is_array()) return invalid_argument("messages[{}].tool_calls must be an array", i);
    for (size_t k = 0; k < calls.size(); ++k) {
      Json& call = calls[k];
      if (!call.is_object()) continue;  // reported when rendered
      const std::string where = fmt::format("messages[{}].tool_calls[{}]", i, k);
      if (call.contains("function") && call["function"].is_object()) {
        RILL_TRY(normalize_arguments(call["function"], where + ".function"));
      } else {
        RILL_TRY(normalize_arguments(call, where));
      }
    }
  }
  return {};
}

Status validate_tools(const Json& request) {
  std::set<std::string> names;
  if (const auto tools = request.find("tools"); tools != request.end() && !tools->is_null()) {
    RILL_TRY(check_tool_list(*tools, "tools", names));
  }
  const auto messages = request.find("messages");
  if (messages == request.end() || !messages->is_array()) return {};
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    if (!m.is_object()) continue;
    const auto tools = m.find("tools");
    if (tools == m.end() || tools->is_null()) continue;
    const std::string where = fmt::format("messages[{}].tools", i);
    if (m.value("role", Json()) != "system")
      return invalid_argument("{}: only system messages may declare tools", where);
    if (python_truthy(m.value("content", Json()))) {
      return invalid_argument("messages[{}]: a system message that declares tools must have empty content",
                              i);
    }
    RILL_TRY(check_tool_list(*tools, where, names));
  }
  return {};
}

}  // namespace rill::text::k3
