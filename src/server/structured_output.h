// The fields that constrain a whole output to a format, on /v1/completions and /v1/chat/completions alike:
// OpenAI's response_format (json_object, json_schema), vLLM's structured_outputs {json, regex, choice,
// json_object} and its older guided_json / guided_regex / guided_choice. Each maps onto the grammar machinery
// of text/constraint (JSON Schema, the regex subset, a choice of literals), so none is silently ignored:
// two of them in one request, a form rill cannot compile (a grammar, a lookahead) or a malformed value is a
// 400 naming the field.
#pragma once

#include <memory>
#include <string>

#include "server/openai/errors.h"
#include "text/constraint/grammar.h"

namespace rill::server {

struct StructuredOutputGrammar {
  std::shared_ptr<const text::constraint::Grammar> grammar;  // null: no format asked for
  std::string field;                                         // the field it came from ("guided_json", ...)
};

ApiResult<StructuredOutputGrammar> structured_output_grammar(const Json& body);

}  // namespace rill::server
