// The grammar a K3 assistant turn follows under tool_choice "required" (what SGLang and TRT-LLM's strict
// mode enforce with xgrammar): the turn goes straight from the response channel into a tools section of one
// or more calls of declared tools, each call's arguments a JSON object that the tool's `parameters` schema
// accepts, written as a raw-JSON block — the XTML form that needs no per-argument type tags:
//
//   [thinking: any text <|close|>think<|sep|><|open|>response<|sep|>]
//   <|close|>response<|sep|><|open|>tools<|sep|>
//     <|open|>call tool="NAME" index="i"<|sep|><|open|>json type="object"<|sep|>{...}<|close|>json<|sep|><|close|>call<|sep|>
//     ... (i = 1, 2, ...; one call when parallel_tool_calls is false)
//   <|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>
//
// The response text is empty: a forced call is all the turn holds (vLLM's "required" likewise returns only
// calls). The thinking channel, when on, is free text.
#pragma once

#include <memory>

#include "core/status.h"
#include "text/constraint/grammar.h"
#include "text/k3/python_json.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::text::k3 {

struct ToolGrammarOptions {
  bool thinking = true;             // the prompt ends in <|open|>think<|sep|> (else <|open|>response<|sep|>)
  bool parallel_tool_calls = true;  // false: exactly one call
  int max_calls = 8;                // calls in one turn when parallel
};

// `request` is the chat request body: tools come from `tools` and from system messages' dynamic `tools`.
// Errors name the tool whose parameters schema cannot be compiled, or the control token the vocabulary lacks.
Result<std::shared_ptr<const constraint::Grammar>> required_tool_call_grammar(const Json& request,
                                                                              const Tokenizer& tokenizer,
                                                                              const ToolGrammarOptions& options);

}  // namespace rill::text::k3
