#include "text/constraint/tool_arguments.h"

#include "text/constraint/json_schema.h"

namespace rill::text::constraint {

Result<std::vector<ToolArguments>> tool_arguments(GrammarBuilder& b,
                                                  const std::vector<const nlohmann::ordered_json*>& tools,
                                                  std::string_view only) {
  std::vector<ToolArguments> out;
  for (size_t k = 0; k < tools.size(); ++k) {
    const nlohmann::ordered_json& tool = *tools[k];
    const nlohmann::ordered_json& fn = tool.contains("function") ? tool.at("function") : tool;
    if (!fn.is_object() || !fn.contains("name") || !fn.at("name").is_string())
      return invalid_argument("tools[{}]: no function name", k);
    const std::string name = fn.at("name").get<std::string>();
    if (!only.empty() && name != only) continue;
    if (!fn.contains("parameters") || fn.at("parameters").is_null()) {
      out.push_back({name, json_object_node(b)});
      continue;
    }
    auto node = json_schema_node(b, fn.at("parameters"));
    if (!node.ok()) return invalid_argument("tool {}: parameters: {}", name, node.status().message());
    out.push_back({name, *node});
  }
  if (!only.empty() && out.empty())
    return invalid_argument("tool_choice names {}, which is not a declared tool", only);
  if (out.empty()) return invalid_argument("a forced tool call needs at least one tool");
  return out;
}

NodeId numbered_calls(GrammarBuilder& b, int first, int n_calls, const std::function<NodeId(int)>& call) {
  // Built from the last call back, so each number is its own node.
  NodeId calls = call(first + n_calls - 1);
  for (int i = first + n_calls - 2; i >= first; --i) calls = b.seq({call(i), b.optional(calls)});
  return calls;
}

}  // namespace rill::text::constraint
