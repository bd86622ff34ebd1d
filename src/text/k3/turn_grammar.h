// Grammars of a K3 assistant turn for constrained decoding (what SGLang and TRT-LLM's strict mode enforce
// with xgrammar). When thinking is on, the think channel is free text and the constraint starts at the
// response channel, as TRT-LLM places it.
//
// tool_choice "required": the turn goes straight from the response channel into a tools section of one
// or more calls of declared tools, each call's arguments a JSON object that the tool's `parameters` schema
// accepts, written as a raw-JSON block — the XTML form that needs no per-argument type tags:
//
//   [thinking: any text <|close|>think<|sep|><|open|>response<|sep|>]
//   <|close|>response<|sep|><|open|>tools<|sep|>
//     <|open|>call tool="NAME" index="i"<|sep|><|open|>json
//     type="object"<|sep|>{...}<|close|>json<|sep|><|close|>call<|sep|>
//     ... (i = 1, 2, ...; one call when parallel_tool_calls is false)
//   <|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>
//
// The response text is empty: a forced call is all the turn holds (vLLM's "required" likewise returns only
// calls). tool_choice naming a function is the same turn with exactly one call, of that tool (vLLM's
// named tool_choice; the prompt is rendered as for "auto", since the reference has no form for it).
//
// response_format json_schema / json_object: the response channel is one JSON value of the schema (any JSON
// object for json_object), then the message ends:
//   [thinking ...] {...}<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "text/constraint/grammar.h"
#include "text/k3/python_json.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::text::k3 {

struct ToolGrammarOptions {
  bool thinking = true;             // the prompt ends in <|open|>think<|sep|> (else <|open|>response<|sep|>)
  bool parallel_tool_calls = true;  // false: exactly one call
  int max_calls = 8;                // calls in one turn when parallel
  std::string named_tool;           // tool_choice naming a function: one call of it ("": any declared tool)
};

// `request` is the chat request body: tools come from `tools` and from system messages' dynamic `tools`.
// Errors name the tool whose parameters schema cannot be compiled (and the schema path), a named tool that
// is not declared, or the control token the vocabulary lacks.
Result<std::shared_ptr<const constraint::Grammar>> required_tool_call_grammar(
    const Json& request, const Tokenizer& tokenizer, const ToolGrammarOptions& options);

// `schema`: the response_format's json_schema.schema, or null for json_object. Errors name the schema path.
Result<std::shared_ptr<const constraint::Grammar>> response_format_grammar(const Json* schema,
                                                                           const Tokenizer& tokenizer,
                                                                           bool thinking);

}  // namespace rill::text::k3
