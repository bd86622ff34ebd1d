// JSON Schema -> grammar: the nodes for one JSON value that a schema accepts, for constrained decoding of
// tool-call arguments and response_format json_schema (what vLLM / SGLang do with xgrammar).
//
// Supported: type (one or a list), properties / required / additionalProperties / minProperties /
// maxProperties, items / prefixItems / additionalItems / minItems / maxItems / uniqueItems (false, or with
// maxItems <= 1), enum / const, anyOf / oneOf, allOf of one schema, $ref to "#", "#/$defs/..." and
// "#/definitions/..." (recursion allowed), string minLength / maxLength / pattern (an ECMAScript subset,
// regex.h) / format (string_formats.h), integer and number minimum / maximum / exclusiveMinimum /
// exclusiveMaximum (exact decimal ranges) / multipleOf 1 / format int32, int64, float, double, boolean,
// null, and `{}` / `true` (any JSON value). Annotations (title, description, default, examples, $schema,
// $id, $comment, ...: kNoOpKeywords in the .cc) are accepted with no effect; every other keyword is an
// error naming its schema path, never silently ignored.
#pragma once

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "text/constraint/grammar.h"

namespace rill::text::constraint {

struct JsonGrammarOptions {
  // Allow one optional space after ',' and ':' (Python json.dumps' default separators); never newlines.
  bool space_after_separators = true;
  // Objects with `properties` allow no other keys unless additionalProperties says so (xgrammar's strict
  // mode).
  bool strict_properties = true;
};

// Fails naming the schema path (e.g. "schema.properties.city.type: unknown type 'str'") for schemas that are
// malformed, unsatisfiable (an empty enum, minimum > maximum, a $ref that does not resolve) or use a
// keyword outside the subset above ("schema.properties.n: keyword \"not\" is not supported").
Result<NodeId> json_schema_node(GrammarBuilder& b, const nlohmann::ordered_json& schema,
                                const JsonGrammarOptions& options = {});

// Any JSON value (response_format json_object uses json_object_node: any JSON object).
NodeId json_value_node(GrammarBuilder& b, const JsonGrammarOptions& options = {});
// A grammar of one JSON value: what `schema` accepts, or any JSON object when it is null (response_format
// json_schema / json_object on a model whose whole output is the response).
Result<std::shared_ptr<const Grammar>> json_grammar(const nlohmann::ordered_json* schema,
                                                    const JsonGrammarOptions& options = {});
NodeId json_object_node(GrammarBuilder& b, const JsonGrammarOptions& options = {});

}  // namespace rill::text::constraint
