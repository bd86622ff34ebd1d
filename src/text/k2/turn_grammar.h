// Grammars of a K2-family assistant turn (Kimi Linear, serving.md §2.2-2.3) for constrained decoding: what
// tool_choice "required" and a named tool_choice force, as text/k3/turn_grammar does for K3.
//
//   [reasoning: any text </think>]
//   <|tool_calls_section_begin|>
//     <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>
//     ... (IDX = first_call_index, +1, ...; one call when parallel_tool_calls is false or a tool is named)
//   <|tool_calls_section_end|><|im_end|>
//
// Each call names a declared tool (the named one only) and its arguments are a JSON object that the tool's
// `parameters` schema accepts. Nothing comes before the section (vLLM's "required" returns only calls), and
// nothing between its markers: the K2 parser would pass such text on as content.
//
// Reasoning: as for K3, a reasoning channel the prompt opens (it ends in "<think>") is free text up to
// "</think>"; the constraint starts there. A prompt that does not open one goes straight to the calls: a
// K2 model that would open "<think>" itself is not offered it.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "text/constraint/grammar.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::text::k2 {

struct ToolGrammarOptions {
  bool reasoning = false;           // the prompt ends in <think>
  bool parallel_tool_calls = true;  // false: exactly one call
  int max_calls = 8;                // calls in one turn when parallel
  int first_call_index = 0;         // IDX of the first call: the calls of earlier turns come before it
  std::string named_tool;           // tool_choice naming a function: one call of it ("": any declared tool)
};

// `request` is the chat request body (tools from `tools`). Errors name the tool whose parameters schema
// cannot be compiled (and the schema path), a named tool that is not declared, or the control token the
// vocabulary lacks.
Result<std::shared_ptr<const constraint::Grammar>> required_tool_call_grammar(
    const nlohmann::ordered_json& request, const Tokenizer& tokenizer, const ToolGrammarOptions& options);

}  // namespace rill::text::k2
