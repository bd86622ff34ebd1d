#include "server/structured_output.h"

#include <optional>
#include <vector>

#include "text/constraint/json_schema.h"
#include "text/constraint/regex.h"

namespace rill::server {
namespace {

namespace tc = text::constraint;

// One format request, before compiling: a JSON schema (null json: any JSON object), a regex or choices.
struct Format {
  enum class Kind { JsonObject, JsonSchema, Regex, Choice } kind = Kind::JsonObject;
  Json schema;
  std::string regex;
  std::vector<std::string> choices;
  std::string field;   // the request field (the error's param)
  std::string prefix;  // what a compile error's message starts with ("" : field + ": ")
};

ApiResult<Format> schema_format(const Json& v, std::string field) {
  Format f{.kind = Format::Kind::JsonSchema, .field = std::move(field)};
  if (v.is_string()) {  // vLLM accepts the schema as JSON text too
    f.schema = Json::parse(v.get<std::string>(), nullptr, false);
    if (f.schema.is_discarded()) return bad_request(f.field, "{}: the string is not JSON (a JSON schema)", f.field);
  } else {
    f.schema = v;
  }
  if (!f.schema.is_object() && !f.schema.is_boolean())
    return bad_request(f.field, "{}: must be a JSON schema (an object)", f.field);
  return f;
}

ApiResult<Format> regex_format(const Json& v, std::string field) {
  if (!v.is_string() || v.get<std::string>().empty())
    return bad_request(field, "{}: must be a non-empty string (a regular expression)", field);
  return Format{.kind = Format::Kind::Regex, .regex = v.get<std::string>(), .field = std::move(field)};
}

ApiResult<Format> choice_format(const Json& v, std::string field) {
  if (!v.is_array() || v.empty()) return bad_request(field, "{}: must be a non-empty array of strings", field);
  Format f{.kind = Format::Kind::Choice, .field = std::move(field)};
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string() || v[i].get<std::string>().empty())
      return bad_request(f.field, "{}[{}]: must be a non-empty string", f.field, i);
    f.choices.push_back(v[i].get<std::string>());
  }
  return f;
}

// Every format the body asks for, in the order of the fields below.
ApiResult<std::vector<Format>> formats(const Json& body) {
  std::vector<Format> out;
  if (const auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return bad_request("response_format", "response_format: must be an object");
    const std::string type = it->value("type", "");
    if (type == "json_object") {
      out.push_back({.kind = Format::Kind::JsonObject, .field = "response_format"});
    } else if (type == "json_schema") {
      const auto js = it->find("json_schema");
      if (js == it->end() || !js->is_object() || !js->contains("schema"))
        return bad_request("response_format", "response_format.json_schema.schema: is required (a JSON schema)");
      RILL_API_ASSIGN_OR_RETURN(Format f, schema_format(js->at("schema"), "response_format"));
      f.prefix = "response_format.json_schema.";  // the compiler's paths start at "schema"
      out.push_back(std::move(f));
    } else if (type != "text") {
      return bad_request("response_format", "response_format.type: must be text, json_object or json_schema, got '{}'",
                         type);
    }
  }
  if (const auto it = body.find("structured_outputs"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return bad_request("structured_outputs", "structured_outputs: must be an object");
    for (const auto& [key, v] : it->items()) {
      if (v.is_null() || (v.is_boolean() && !v.get<bool>())) continue;
      const std::string field = "structured_outputs." + key;
      if (key == "json") {
        RILL_API_ASSIGN_OR_RETURN(Format f, schema_format(v, field));
        out.push_back(std::move(f));
      } else if (key == "regex") {
        RILL_API_ASSIGN_OR_RETURN(Format f, regex_format(v, field));
        out.push_back(std::move(f));
      } else if (key == "choice") {
        RILL_API_ASSIGN_OR_RETURN(Format f, choice_format(v, field));
        out.push_back(std::move(f));
      } else if (key == "json_object") {
        out.push_back({.kind = Format::Kind::JsonObject, .field = field});
      } else if (key == "grammar" || key == "structural_tag") {
        return bad_request(field, "{}: not supported (rill compiles JSON schemas, regular expressions and "
                           "choices: use json, regex or choice)", field);
      } else if (key != "backend" && key != "disable_any_whitespace" && key != "disable_additional_properties" &&
                 key != "whitespace_pattern" && key != "disable_fallback") {
        return bad_request(field, "{}: unknown key (json, regex, choice, json_object)", field);
      }
    }
  }
  auto legacy = [&](const char* key, auto parse) -> std::optional<ApiError> {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) return std::nullopt;
    auto f = parse(*it, std::string(key));
    if (!f.ok()) return f.error();
    out.push_back(std::move(f).value());
    return std::nullopt;
  };
  RILL_API_TRY(legacy("guided_json", schema_format));
  RILL_API_TRY(legacy("guided_regex", regex_format));
  RILL_API_TRY(legacy("guided_choice", choice_format));
  if (const auto it = body.find("guided_grammar"); it != body.end() && !it->is_null())
    return bad_request("guided_grammar", "guided_grammar: not supported (use guided_json, guided_regex or "
                       "guided_choice)");
  return out;
}

}  // namespace

ApiResult<StructuredOutputGrammar> structured_output_grammar(const Json& body) {
  RILL_API_ASSIGN_OR_RETURN(std::vector<Format> fs, formats(body));
  StructuredOutputGrammar out;
  if (fs.empty()) return out;
  if (fs.size() > 1)
    return bad_request(fs[1].field, "{} and {}: give one output format", fs[0].field, fs[1].field);
  const Format& f = fs[0];
  out.field = f.field;
  Result<std::shared_ptr<const tc::Grammar>> grammar = internal_error("no format");
  switch (f.kind) {
    case Format::Kind::JsonObject:
      grammar = tc::json_grammar(nullptr);
      break;
    case Format::Kind::JsonSchema: {
      grammar = tc::json_grammar(&f.schema);
      break;
    }
    case Format::Kind::Regex: {
      auto regex = tc::parse_regex(f.regex);
      if (!regex.ok()) return bad_request(f.field, "{}: {}", f.field, regex.status().message());
      tc::GrammarBuilder b;
      grammar = b.build(tc::text_node(b, *regex));
      break;
    }
    case Format::Kind::Choice: {
      tc::GrammarBuilder b;
      std::vector<tc::NodeId> alts;
      for (const std::string& c : f.choices) alts.push_back(b.bytes(c));
      grammar = b.build(b.alt(std::move(alts)));
      break;
    }
  }
  if (!grammar.ok())
    return bad_request(f.field, "{}{}", f.prefix.empty() ? f.field + ": " : f.prefix, grammar.status().message());
  out.grammar = *grammar;
  return out;
}

}  // namespace rill::server
