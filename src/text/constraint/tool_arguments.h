// The parts of a forced tool-call turn that do not depend on the model's format: each declared tool's
// arguments (a JSON object its `parameters` schema accepts) and a run of one to n numbered calls. The
// formats themselves live with their families (text/k2, text/k3 turn_grammar).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "text/constraint/grammar.h"

namespace rill::text::constraint {

struct ToolArguments {
  std::string name;
  NodeId arguments;  // one JSON object: what `parameters` accepts, any object when it is absent
};

// `tools` are OpenAI tool entries ({"type": "function", "function": {...}} or the bare function object).
// With `only` set, just that tool (tool_choice naming a function); an error when it is not declared. Errors
// name the tool whose parameters schema cannot be compiled, and the schema path.
Result<std::vector<ToolArguments>> tool_arguments(GrammarBuilder& b,
                                                  const std::vector<const nlohmann::ordered_json*>& tools,
                                                  std::string_view only = "");

// call(first) [call(first + 1) [... call(first + n - 1)]]: one to n calls, call(i) the node of the call
// numbered i (the number is part of what the model writes).
NodeId numbered_calls(GrammarBuilder& b, int first, int n_calls, const std::function<NodeId(int)>& call);

}  // namespace rill::text::constraint
