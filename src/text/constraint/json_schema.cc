// JSON Schema -> grammar nodes. Two layers: JsonSyntax builds the pieces of compact JSON text (strings,
// numbers, separators, any value) once per call and shares them, and SchemaCompiler walks the schema one
// keyword family at a time, carrying the schema path that every error names.
//
// Choices where the spec leaves room (a grammar only has to accept *some* valid spelling of each value):
// - Object keys come in the order of `properties`, then required keys missing from `properties` (in
//   `required` order), then additional keys. A model can always write that order; accepting every order
//   would make the grammar exponential in the number of properties.
// - Additional keys are any JSON string, not "any string except the listed names": excluding a finite set of
//   strings (with every escape spelling of them) is not worth its grammar size. A listed key can therefore
//   reappear as an additional key, and the parsed value then depends on the client's duplicate-key rule.
// - enum / const values are spelled as nlohmann's compact dump() only (1.0 stays "1.0", never "1"; objects
//   carry no spaces). For floats this is the shortest round-trip form, the same text as Python's
//   json.dumps except for magnitudes in [1e15, 1e16), where nlohmann writes "1e+15" and Python
//   "1000000000000000.0"; both parse to the same double.
// - A required key missing from `properties` takes additionalProperties' schema, or any value when that is
//   false (strictly the schema would then accept nothing; the author clearly wants the key).
// - "integer" is integer syntax only: 1.0 (an integer for JSON Schema) is not offered. Unbounded numbers
//   have bounded literals: at most 16 integer digits, 16 fraction digits and a 3-digit exponent (number()
//   says why). Bounded ones (minimum, maximum, exclusive*) are exact digit ranges over the decimal text
//   (number_range.h): no exponent, no "-0"; bounds are compared as decimals, so a validator that parses
//   into doubles (ajv) can only disagree within a double's rounding of an exclusive bound. multipleOf: 1
//   only (integer syntax).
// - pattern and format compile to whole-string matches (regex.h, string_formats.h): every such string is
//   valid for the unanchored JSON Schema pattern too. Together with minLength / maxLength the pattern's
//   repeat counts are narrowed when the pattern's shape allows (regex.h fit_length), else an error.
// - Without `type`, the keywords of a type say which are meant: properties / required /
//   additionalProperties / min-maxProperties an object, items / prefixItems / min-maxItems / uniqueItems an
//   array, minLength / maxLength / pattern / format a string, minimum / maximum / exclusive* / multipleOf a
//   number (format int32 / int64 an integer); with none of them the schema accepts any value.
// - min/maxProperties count listed and additional members alike. uniqueItems true is an error unless
//   maxItems <= 1 (distinct items are not context-free).
// - \uXXXX escapes exclude lone surrogates (strict parsers, nlohmann's included, reject them); a surrogate
//   pair counts as one character for minLength / maxLength, as its code point does.
// - oneOf is compiled like anyOf: exclusivity between branches cannot be expressed by this grammar.
// - A $ref cycle with no JSON text in between ({"$ref": "#"} at the top) would be a left-recursive rule,
//   which the matcher cannot run: an error.
// - No keyword is dropped silently: one the compiler does not implement (not, if/then/else,
//   patternProperties, contains, dependentRequired, a typo, ...) is an error naming it and its schema
//   path, and so is one next to $ref / allOf / anyOf / oneOf (merging siblings into a combinator is not
//   implemented) or next to enum / const (other than `type`, which filters their values). Accepted with no
//   effect: the annotations in kNoOpKeywords and "x-" extensions.
#include "text/constraint/json_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "text/constraint/number_range.h"
#include "text/constraint/regex.h"
#include "text/constraint/string_formats.h"

namespace rill::text::constraint {
namespace {

using Json = nlohmann::ordered_json;

std::bitset<256> byte_set(std::string_view chars) {
  std::bitset<256> set;
  for (char c : chars) set.set(uint8_t(c));
  return set;
}

// The pieces of JSON text that every schema shares; each is built on first use and reused after.
class JsonSyntax {
 public:
  JsonSyntax(GrammarBuilder& b, const JsonGrammarOptions& options) : b_(b), options_(options) {}

  NodeId comma() {
    return cached(comma_, [&] { return separator(","); });
  }
  NodeId colon() {
    return cached(colon_, [&] { return separator(":"); });
  }

  // A JSON string of [min_chars, max_chars] characters (max -1: unbounded); an escape is one character.
  NodeId string(int32_t min_chars, int32_t max_chars) {
    if (min_chars == 0 && max_chars < 0) return cached(any_string_, [&] { return make_string(0, -1); });
    return make_string(min_chars, max_chars);
  }
  NodeId any_string() { return string(0, -1); }

  // Unbounded numbers have bounded literals (as xgrammar's and llama.cpp's JSON grammars do): up to
  // kMaxIntegerDigits digits before the point, kMaxFractionDigits after it and kMaxExponentDigits of exponent
  // (three: doubles reach 1.8e308). A model that keeps writing digits (a small or random one does:
  // "1.0000...") then has to end the number, so the output is complete JSON instead of running on until
  // max_tokens.
  static constexpr int32_t kMaxIntegerDigits = 16, kMaxFractionDigits = 16, kMaxExponentDigits = 3;

  // -?(0|[1-9][0-9]{0,15})
  NodeId integer() {
    return cached(integer_, [&] {
      return b_.seq({b_.optional(b_.bytes("-")),
                     b_.alt({b_.bytes("0"), b_.seq({b_.byte_range('1', '9'),
                                                    b_.repeat(digit(), 0, kMaxIntegerDigits - 1)})})});
    });
  }

  // integer (.[0-9]{1,16})? ([eE][+-]?[0-9]{1,3})?
  NodeId number() {
    return cached(number_, [&] {
      const NodeId fraction = b_.seq({b_.bytes("."), b_.repeat(digit(), 1, kMaxFractionDigits)});
      const NodeId exponent = b_.seq({b_.byte_class(byte_set("eE")), b_.optional(b_.byte_class(byte_set("+-"))),
                                      b_.repeat(digit(), 1, kMaxExponentDigits)});
      return b_.seq({integer(), b_.optional(fraction), b_.optional(exponent)});
    });
  }

  NodeId boolean() { return b_.alt({b_.bytes("true"), b_.bytes("false")}); }

  // `item` between min and max times (max -1: unbounded), separated by commas.
  NodeId list(NodeId item, int32_t min, int32_t max) {
    if (max == 0) return b_.empty();
    const NodeId more = b_.repeat(b_.seq({comma(), item}), std::max(min - 1, 0), max < 0 ? -1 : max - 1);
    const NodeId some = b_.seq({item, more});
    return min == 0 ? b_.optional(some) : some;
  }

  // "key":value pairs with any key, as many as wanted.
  NodeId object_of(NodeId value) {
    return b_.seq({b_.bytes("{"), list(member(any_string(), value), 0, -1), b_.bytes("}")});
  }
  NodeId member(NodeId key, NodeId value) { return b_.seq({key, colon(), value}); }
  NodeId array_of(NodeId item, int32_t min, int32_t max) {
    return b_.seq({b_.bytes("["), list(item, min, max), b_.bytes("]")});
  }

  // One rule for any value, so objects and arrays can nest without end.
  NodeId any_value() {
    if (any_value_ >= 0) return any_value_;
    any_value_ = b_.declare_rule();
    any_object_ = object_of(any_value_);
    b_.define_rule(any_value_, b_.alt({any_object_, array_of(any_value_, 0, -1), any_string(), number(),
                                       boolean(), b_.bytes("null")}));
    return any_value_;
  }
  NodeId any_object() {
    any_value();
    return any_object_;
  }

 private:
  template <typename Make>
  NodeId cached(NodeId& slot, Make make) {
    if (slot < 0) slot = make();
    return slot;
  }

  NodeId separator(std::string_view sep) {
    if (!options_.space_after_separators) return b_.bytes(sep);
    return b_.seq({b_.bytes(sep), b_.optional(b_.bytes(" "))});
  }

  NodeId digit() {
    return cached(digit_, [&] { return b_.byte_range('0', '9'); });
  }
  NodeId hex_digit() {
    return cached(hex_digit_, [&] { return b_.byte_class(byte_set("0123456789abcdefABCDEF")); });
  }

  // After "\u": four hex digits naming a code point outside D800-DFFF, or a high surrogate followed by
  // "\u" and a low one (one character either way).
  NodeId unicode_escape_body() {
    const NodeId h = hex_digit();
    const NodeId plain = b_.alt({b_.seq({b_.byte_class(byte_set("0123456789abcABCefEF")), h, h, h}),
                                 b_.seq({b_.byte_class(byte_set("dD")), b_.byte_range('0', '7'), h, h})});
    const NodeId high = b_.seq({b_.byte_class(byte_set("dD")), b_.byte_class(byte_set("89abAB")), h, h});
    const NodeId low = b_.seq({b_.byte_class(byte_set("dD")), b_.byte_class(byte_set("cdefCDEF")), h, h});
    return b_.alt({plain, b_.seq({high, b_.bytes("\\u"), low})});
  }

  // One character inside a JSON string: a literal UTF-8 character (no '"', '\\' or control character) or
  // an escape.
  NodeId string_char() {
    return cached(string_char_, [&] {
      const NodeId escape = b_.seq(
          {b_.bytes("\\"),
           b_.alt({b_.byte_class(byte_set("\"\\/bfnrt")), b_.seq({b_.bytes("u"), unicode_escape_body()})})});
      return b_.alt({b_.utf8_char("\"\\"), escape});
    });
  }

  NodeId make_string(int32_t min_chars, int32_t max_chars) {
    return b_.seq({b_.bytes("\""), b_.repeat(string_char(), min_chars, max_chars), b_.bytes("\"")});
  }

  GrammarBuilder& b_;
  JsonGrammarOptions options_;
  NodeId comma_ = -1, colon_ = -1, digit_ = -1, hex_digit_ = -1, string_char_ = -1, any_string_ = -1;
  NodeId integer_ = -1, number_ = -1, any_value_ = -1, any_object_ = -1;
};

// Deep enough for any real schema; a guard for the compiler's recursion against hostile input.
constexpr int kMaxSchemaDepth = 128;

const std::set<std::string, std::less<>> kTypeNames = {"string", "integer", "number", "boolean",
                                                       "null",   "object",  "array"};

using KeywordSet = std::set<std::string, std::less<>>;

// Accepted anywhere, with no effect on the grammar: annotations (JSON Schema 2020-12 core identifiers and
// the meta-data and content vocabularies, OpenAPI's `example`), the $defs containers that $ref reads, and
// two OpenAPI keywords whose omission only narrows: `nullable` (null is not offered) and `discriminator`
// (the oneOf branches carry the constraint). Keys starting "x-" are OpenAPI extensions, annotations too.
const KeywordSet kNoOpKeywords = {
    "$schema",  "$id",         "$anchor",         "$comment",         "$defs",    "definitions",
    "title",    "description", "default",         "examples",         "example",  "deprecated",
    "readOnly", "writeOnly",   "contentEncoding", "contentMediaType", "nullable", "discriminator"};

// The keywords of each type; without `type` they also say which types are meant (object, array, string,
// number, in that order).
const KeywordSet kObjectKeywords = {"properties", "required", "additionalProperties", "minProperties",
                                    "maxProperties"};
const KeywordSet kArrayKeywords = {"items",    "prefixItems", "additionalItems",
                                   "minItems", "maxItems",    "uniqueItems"};
const KeywordSet kStringKeywords = {"minLength", "maxLength", "pattern", "format"};
const KeywordSet kNumberKeywords = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                    "multipleOf"};

// "type" and the keywords of every type: what a schema compiled by its type may hold.
const KeywordSet& typed_keywords() {
  static const KeywordSet keywords = [] {
    KeywordSet k = {"type"};
    for (const KeywordSet* set : {&kObjectKeywords, &kArrayKeywords, &kStringKeywords, &kNumberKeywords})
      k.insert(set->begin(), set->end());
    return k;
  }();
  return keywords;
}

// `format` values of integers (OpenAPI: ranges, enforced) and of numbers (OpenAPI: the storage type, no
// constraint on the JSON value).
const KeywordSet kIntegerFormats = {"int32", "int64"};
const KeywordSet kNumberFormats = {"float", "double"};

bool is_whole(double d) {
  return std::isfinite(d) && std::trunc(d) == d;
}

bool value_has_type(const Json& v, std::string_view type) {
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "integer") return v.is_number_integer() || (v.is_number_float() && is_whole(v.get<double>()));
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  return false;
}

class SchemaCompiler {
 public:
  SchemaCompiler(GrammarBuilder& b, const Json& root, const JsonGrammarOptions& options)
      : b_(b), syntax_(b, options), root_(root), options_(options) {}

  Result<NodeId> compile(const Json& schema, const std::string& path) {
    if (++depth_ > kMaxSchemaDepth)
      return invalid_argument("{}: schemas nested deeper than {} levels", path, kMaxSchemaDepth);
    Result<NodeId> node = compile_keywords(schema, path);
    --depth_;
    // The innermost schema where the grammar passed a limit names it; the schemas around it pass it on.
    if (node.ok() && !b_.limit_status().ok())
      return invalid_argument("{}: {}", path, b_.limit_status().message());
    return node;
  }

 private:
  // Keyword families in priority order: the first one present decides the node.
  Result<NodeId> compile_keywords(const Json& schema, const std::string& path) {
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return syntax_.any_value();
      return invalid_argument("{}: the schema `false` accepts no value", path);
    }
    if (!schema.is_object()) return invalid_argument("{}: a schema must be an object or a boolean", path);
    // A combinator takes no sibling keyword (but no-ops): merging siblings into it is not implemented.
    if (schema.contains("$ref")) {
      RILL_TRY(check_keywords(schema, path, "$ref", {"$ref"}));
      return compile_ref(schema["$ref"], path + ".$ref");
    }
    if (schema.contains("allOf")) {
      RILL_TRY(check_keywords(schema, path, "allOf", {"allOf"}));
      return compile_all_of(schema["allOf"], path + ".allOf");
    }
    for (const char* keyword : {"anyOf", "oneOf"}) {
      if (!schema.contains(keyword)) continue;
      RILL_TRY(check_keywords(schema, path, keyword, {keyword}));
      return compile_any_of(schema[keyword], path + "." + keyword);
    }
    if (schema.contains("const") || schema.contains("enum")) {
      RILL_TRY(check_keywords(schema, path, schema.contains("const") ? "const" : "enum",
                              {"const", "enum", "type"}));
      return compile_enum(schema, path);
    }
    RILL_TRY(check_keywords(schema, path, "type", typed_keywords()));
    return compile_types(schema, path);
  }

  // Every keyword of `schema` is in `allowed` or a no-op (kNoOpKeywords): the compiler never drops a
  // keyword that narrows the values silently. `family` is the keyword that decided how `schema` compiles.
  Status check_keywords(const Json& schema, const std::string& path, std::string_view family,
                        const KeywordSet& allowed) {
    static const KeywordSet known = [] {
      KeywordSet k = typed_keywords();
      k.insert({"$ref", "allOf", "anyOf", "oneOf", "const", "enum"});
      return k;
    }();
    for (const auto& [key, value] : schema.items()) {
      if (allowed.contains(key) || kNoOpKeywords.contains(key) || key.starts_with("x-")) continue;
      if (known.contains(key))
        return invalid_argument("{}: \"{}\" next to \"{}\" is not supported", path, key, family);
      return invalid_argument("{}: keyword \"{}\" is not supported", path, key);
    }
    return {};
  }

  // ---- $ref: each target compiles once into a rule, so recursive schemas close on themselves ----

  Result<NodeId> compile_ref(const Json& ref_value, const std::string& path) {
    if (!ref_value.is_string()) return invalid_argument("{}: must be a string", path);
    const std::string ref = ref_value.get<std::string>();
    // A cycle through refs with no JSON text in between would be a left-recursive rule (it never ends).
    if (std::find(unguarded_refs_.begin(), unguarded_refs_.end(), ref) != unguarded_refs_.end())
      return invalid_argument("{}: \"{}\" refers back to itself without any JSON text in between", path, ref);
    if (auto it = ref_rules_.find(ref); it != ref_rules_.end()) return it->second;
    if (ref.empty() || ref[0] != '#')
      return invalid_argument(
          "{}: only references inside the schema (\"#\", \"#/$defs/...\") are supported, got \"{}\"", path,
          ref);
    const Json* target = nullptr;
    std::string target_path = "schema";
    try {
      const Json::json_pointer pointer(ref.substr(1));
      if (root_.contains(pointer)) target = &root_.at(pointer);
      std::vector<std::string> tokens;
      for (Json::json_pointer p = pointer; !p.empty(); p = p.parent_pointer()) tokens.push_back(p.back());
      for (auto it = tokens.rbegin(); it != tokens.rend(); ++it) target_path += "." + *it;
    } catch (const Json::exception& e) {
      return invalid_argument("{}: \"{}\" is not a JSON pointer ({})", path, ref, e.what());
    }
    if (target == nullptr)
      return invalid_argument("{}: \"{}\" does not resolve to anything in the schema", path, ref);

    const NodeId rule = b_.declare_rule();
    ref_rules_[ref] = rule;
    unguarded_refs_.push_back(ref);
    Result<NodeId> body = compile(*target, target_path);
    unguarded_refs_.pop_back();
    if (!body.ok()) return body.status();
    b_.define_rule(rule, *body);
    return rule;
  }

  // A value inside an object or array: text ('{' or '[') comes before it, so refs seen on the way to it no
  // longer form a cycle without text.
  Result<NodeId> compile_nested(const Json& schema, const std::string& path) {
    std::vector<std::string> outer;
    outer.swap(unguarded_refs_);
    Result<NodeId> node = compile(schema, path);
    unguarded_refs_.swap(outer);
    return node;
  }

  // ---- allOf / anyOf / oneOf ----

  Result<NodeId> compile_all_of(const Json& all_of, const std::string& path) {
    if (!all_of.is_array() || all_of.empty())
      return invalid_argument("{}: must be a non-empty list of schemas", path);
    if (all_of.size() > 1) return invalid_argument("{}: allOf with several schemas is not supported", path);
    return compile(all_of[0], path + "[0]");
  }

  // oneOf comes here too: "exactly one branch" cannot be checked by a grammar, and a model that writes a
  // value matching one branch has written a valid value in the usual case of disjoint branches.
  Result<NodeId> compile_any_of(const Json& branches, const std::string& path) {
    if (!branches.is_array() || branches.empty())
      return invalid_argument("{}: must be a non-empty list of schemas", path);
    std::vector<NodeId> nodes;
    for (size_t i = 0; i < branches.size(); ++i) {
      if (branches[i].is_boolean() && !branches[i].get<bool>()) continue;  // accepts nothing: adds nothing
      RILL_ASSIGN_OR_RETURN(NodeId node, compile(branches[i], fmt::format("{}[{}]", path, i)));
      nodes.push_back(node);
    }
    if (nodes.empty()) return invalid_argument("{}: every branch is `false`", path);
    return b_.alt(std::move(nodes));
  }

  // ---- enum / const ----

  // const is an enum of one value (const wins when both are given).
  Result<NodeId> compile_enum(const Json& schema, const std::string& schema_path) {
    const bool is_const = schema.contains("const");
    const std::string path = schema_path + (is_const ? ".const" : ".enum");
    const Json values = is_const ? Json::array({schema["const"]}) : schema["enum"];
    if (!values.is_array()) return invalid_argument("{}: must be a list of values", path);
    if (values.empty()) return invalid_argument("{}: an empty enum accepts no value", path);
    // Checked before any value is printed: each is one branch of a choice (GrammarLimits).
    if (values.size() > b_.limits().max_alternatives)
      return invalid_argument("{}: {} values exceed the limit of {}", path, values.size(),
                              b_.limits().max_alternatives);
    RILL_ASSIGN_OR_RETURN(std::vector<std::string> types, type_names(schema, schema_path));
    std::vector<NodeId> nodes;
    std::set<std::string> seen;
    for (size_t i = 0; i < values.size(); ++i) {
      const Json& v = values[i];
      if (!types.empty() && std::none_of(types.begin(), types.end(),
                                         [&](const std::string& t) { return value_has_type(v, t); }))
        continue;
      std::string text;
      try {
        text = v.dump();
      } catch (const Json::exception&) {
        return invalid_argument("{}[{}]: not valid UTF-8", path, i);
      }
      if (seen.insert(text).second) nodes.push_back(b_.bytes(text));
    }
    if (nodes.empty()) return invalid_argument("{}: no value has the schema's type", path);
    return b_.alt(std::move(nodes));
  }

  // ---- type ----

  // The names in `type` (one or a list), checked; empty when the schema has no `type`.
  Result<std::vector<std::string>> type_names(const Json& schema, const std::string& path) {
    std::vector<std::string> names;
    if (!schema.contains("type")) return names;
    const Json& type = schema["type"];
    const Json list = type.is_array() ? type : Json::array({type});
    if (list.empty()) return invalid_argument("{}.type: an empty list of types accepts no value", path);
    for (const Json& t : list) {
      if (!t.is_string()) return invalid_argument("{}.type: must be a type name or a list of them", path);
      const std::string name = t.get<std::string>();
      if (!kTypeNames.contains(name)) return invalid_argument("{}.type: unknown type \"{}\"", path, name);
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    return names;
  }

  Result<NodeId> compile_types(const Json& schema, const std::string& path) {
    RILL_ASSIGN_OR_RETURN(std::vector<std::string> types, type_names(schema, path));
    if (types.empty()) {
      // No `type`: the keywords that only make sense for one type say which; otherwise anything goes.
      auto has_any = [&](const KeywordSet& keywords) {
        return std::any_of(keywords.begin(), keywords.end(),
                           [&](const std::string& k) { return schema.contains(k); });
      };
      if (has_any(kObjectKeywords)) types.push_back("object");
      if (has_any(kArrayKeywords)) types.push_back("array");
      const bool integer_format = schema.contains("format") && schema["format"].is_string() &&
                                  kIntegerFormats.contains(schema["format"].get<std::string>());
      if (has_any(kStringKeywords) && !integer_format) types.push_back("string");
      if (has_any(kNumberKeywords) || integer_format) types.push_back(integer_format ? "integer" : "number");
      if (types.empty()) return syntax_.any_value();
    }
    RILL_TRY(check_format(schema, types, path));
    std::vector<NodeId> nodes;
    for (const std::string& type : types) {
      RILL_ASSIGN_OR_RETURN(NodeId node, compile_type(schema, type, path));
      nodes.push_back(node);
    }
    return b_.alt(std::move(nodes));
  }

  Result<NodeId> compile_type(const Json& schema, const std::string& type, const std::string& path) {
    if (type == "string") return compile_string(schema, path);
    if (type == "integer" || type == "number") return compile_number(schema, type == "integer", path);
    if (type == "boolean") return syntax_.boolean();
    if (type == "null") return b_.bytes("null");
    if (type == "object") return compile_object(schema, path);
    return compile_array(schema, path);  // type_names() admitted nothing else
  }

  // `format` must mean something to one of the types (a string format, or an integer / number one).
  Status check_format(const Json& schema, const std::vector<std::string>& types, const std::string& path) {
    if (!schema.contains("format")) return {};
    if (!schema["format"].is_string()) return invalid_argument("{}.format: must be a string", path);
    const std::string format = schema["format"].get<std::string>();
    for (const std::string& type : types)
      if (format_of(schema, type)) return {};
    return invalid_argument(
        "{}.format: \"{}\" is not supported (strings: {}; integers: int32, int64; numbers: float, double)",
        path, format, string_format_names());
  }

  // The schema's format when it applies to `type`.
  static std::optional<std::string> format_of(const Json& schema, std::string_view type) {
    if (!schema.contains("format") || !schema["format"].is_string()) return std::nullopt;
    std::string format = schema["format"].get<std::string>();
    const bool applies = type == "string"    ? string_format_pattern(format).has_value()
                         : type == "integer" ? kIntegerFormats.contains(format)
                         : type == "number"  ? kNumberFormats.contains(format)
                                             : false;
    return applies ? std::optional<std::string>(std::move(format)) : std::nullopt;
  }

  // ---- counts (minLength, maxItems, ...) ----

  // A non-negative integer keyword, `absent` when the schema lacks it. Counts past int32 are capped there:
  // as a maximum that is as good as unbounded, as a minimum no model output reaches it anyway.
  Result<int32_t> count(const Json& schema, const char* key, int32_t absent, const std::string& path) {
    if (!schema.contains(key)) return absent;
    const Json& v = schema[key];
    const bool integral = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0) ||
                          (v.is_number_float() && v.get<double>() >= 0 && is_whole(v.get<double>()));
    if (!integral) return invalid_argument("{}.{}: must be a non-negative integer", path, key);
    return int32_t(std::min(v.get<double>(), double(std::numeric_limits<int32_t>::max())));
  }

  // [min, max] from a pair of count keywords; max -1 when absent (or too large to matter).
  Result<std::pair<int32_t, int32_t>> bounds(const Json& schema, const char* min_key, const char* max_key,
                                             const std::string& path) {
    RILL_ASSIGN_OR_RETURN(const int32_t min, count(schema, min_key, 0, path));
    RILL_ASSIGN_OR_RETURN(int32_t max, count(schema, max_key, -1, path));
    if (max == std::numeric_limits<int32_t>::max()) max = -1;
    if (max >= 0 && min > max)
      return invalid_argument("{}: {} {} is greater than {} {}", path, min_key, min, max_key, max);
    return std::pair<int32_t, int32_t>(min, max);
  }

  // ---- string ----

  // pattern or format: the expression's strings, cut to minLength / maxLength when those are given.
  Result<NodeId> compile_string(const Json& schema, const std::string& path) {
    RILL_ASSIGN_OR_RETURN(auto length, bounds(schema, "minLength", "maxLength", path));
    const std::optional<std::string> format = format_of(schema, "string");
    if (!schema.contains("pattern") && !format) return syntax_.string(length.first, length.second);
    if (schema.contains("pattern") && format)
      return invalid_argument("{}: pattern together with format \"{}\" is not supported", path, *format);
    std::string where = path + ".format", pattern;
    if (format) {
      pattern = std::string(*string_format_pattern(*format));
    } else {
      where = path + ".pattern";
      if (!schema["pattern"].is_string()) return invalid_argument("{}: must be a string", where);
      pattern = schema["pattern"].get<std::string>();
    }
    Result<Regex> regex = parse_regex(pattern);
    if (!regex.ok()) return invalid_argument("{}: {}", where, regex.status().message());
    Result<Regex> fitted = fit_length(*regex, length.first, length.second);
    if (!fitted.ok()) return invalid_argument("{}: {}", where, fitted.status().message());
    return json_string_node(b_, *fitted);
  }

  // ---- integer / number ----

  // A bound keyword's value as a decimal; nullopt when absent.
  Result<std::optional<Decimal>> decimal(const Json& schema, const char* key, const std::string& path) {
    if (!schema.contains(key)) return std::optional<Decimal>();
    const Json& v = schema[key];
    if (!v.is_number()) return invalid_argument("{}.{}: must be a number", path, key);
    // A double's shortest round-trip text: what the schema's author wrote, in the usual case.
    const std::string text = v.is_number_float() ? fmt::format("{}", v.get<double>()) : v.dump();
    std::optional<Decimal> d = Decimal::parse(text);
    if (!d) return invalid_argument("{}.{}: {} is not a finite number", path, key, text);
    return d;
  }

  // minimum / maximum / exclusiveMinimum / exclusiveMaximum (a number, or draft 4's boolean that makes the
  // plain bound exclusive); the tighter one wins where both ends of a side are given.
  Result<NumberRange> number_range(const Json& schema, const std::string& path) {
    NumberRange range;
    for (const bool lower : {true, false}) {
      const char* plain = lower ? "minimum" : "maximum";
      const char* exclusive = lower ? "exclusiveMinimum" : "exclusiveMaximum";
      RILL_ASSIGN_OR_RETURN(std::optional<Decimal> inclusive_value, decimal(schema, plain, path));
      std::optional<Bound> bound;
      if (inclusive_value) bound = Bound{*inclusive_value, false};
      if (schema.contains(exclusive) && schema[exclusive].is_boolean()) {
        if (schema[exclusive].get<bool>()) {
          if (!bound) return invalid_argument("{}.{}: true needs {}", path, exclusive, plain);
          bound->exclusive = true;
        }
      } else {
        RILL_ASSIGN_OR_RETURN(std::optional<Decimal> exclusive_value, decimal(schema, exclusive, path));
        if (exclusive_value) {
          const int c = bound ? compare(*exclusive_value, bound->value) : 0;
          if (!bound || (lower ? c >= 0 : c <= 0)) bound = Bound{*exclusive_value, true};
        }
      }
      (lower ? range.lo : range.hi) = bound;
    }
    if (range.empty())
      return invalid_argument("{}: no number lies between the minimum and the maximum", path);
    return range;
  }

  Result<NodeId> compile_number(const Json& schema, bool integer, const std::string& path) {
    RILL_ASSIGN_OR_RETURN(NumberRange range, number_range(schema, path));
    if (schema.contains("multipleOf")) {
      RILL_ASSIGN_OR_RETURN(std::optional<Decimal> step, decimal(schema, "multipleOf", path));
      if (step->text() != "1")
        return invalid_argument(
            "{}.multipleOf: {} is not supported (only 1: a grammar cannot check divisibility)", path,
            step->text());
      integer = true;
    }
    if (!integer) return range.lo || range.hi ? number_range_node(b_, range) : syntax_.number();
    // The integers of the range: round the ends inwards.
    std::optional<Decimal> lo, hi;
    if (range.lo) lo = range.lo->exclusive ? range.lo->value.floor().plus_one() : range.lo->value.ceil();
    if (range.hi) hi = range.hi->exclusive ? range.hi->value.ceil().minus_one() : range.hi->value.floor();
    if (const auto format = format_of(schema, "integer")) {
      const bool is32 = *format == "int32";
      const Decimal min = *Decimal::parse(is32 ? "-2147483648" : "-9223372036854775808");
      const Decimal max = *Decimal::parse(is32 ? "2147483647" : "9223372036854775807");
      if (!lo || compare(*lo, min) < 0) lo = min;
      if (!hi || compare(*hi, max) > 0) hi = max;
    }
    if (!lo && !hi) return syntax_.integer();
    if (lo && hi && compare(*lo, *hi) > 0)
      return invalid_argument("{}: no integer lies between the minimum and the maximum", path);
    return integer_range_node(b_, lo, hi);
  }

  // ---- object ----

  struct Property {
    std::string key_text;  // the key as a JSON string literal
    NodeId value;
    bool required;
  };

  Result<NodeId> compile_object(const Json& schema, const std::string& path) {
    const bool has_properties = schema.contains("properties");
    const Json no_properties = Json::object();
    const Json& properties = has_properties ? schema["properties"] : no_properties;
    if (!properties.is_object()) return invalid_argument("{}.properties: must be an object of schemas", path);
    RILL_ASSIGN_OR_RETURN(std::vector<std::string> required, required_keys(schema, path));
    RILL_ASSIGN_OR_RETURN(std::optional<NodeId> additional, additional_value(schema, has_properties, path));

    std::vector<Property> listed;
    for (const auto& [key, sub] : properties.items()) {
      const bool is_required = std::find(required.begin(), required.end(), key) != required.end();
      const std::string sub_path = path + ".properties." + key;
      if (sub.is_boolean() && !sub.get<bool>()) {  // the key may not appear at all
        if (is_required) return invalid_argument("{}: required, but its schema is `false`", sub_path);
        continue;
      }
      RILL_ASSIGN_OR_RETURN(NodeId value, compile_nested(sub, sub_path));
      RILL_ASSIGN_OR_RETURN(std::string key_text, key_literal(key, sub_path));
      listed.push_back({std::move(key_text), value, is_required});
    }
    // Required keys that `properties` does not describe: additionalProperties decides their value, and
    // any value when it forbids them (the schema asks for the key; a grammar that accepts nothing helps no
    // one).
    for (const std::string& key : required) {
      if (properties.contains(key)) continue;
      RILL_ASSIGN_OR_RETURN(std::string key_text, key_literal(key, path + ".required"));
      listed.push_back({std::move(key_text), additional.value_or(syntax_.any_value()), true});
    }
    RILL_ASSIGN_OR_RETURN(auto counts, bounds(schema, "minProperties", "maxProperties", path));
    const int32_t n_required =
        int32_t(std::count_if(listed.begin(), listed.end(), [](const Property& p) { return p.required; }));
    if (counts.second >= 0 && n_required > counts.second)
      return invalid_argument("{}: maxProperties {} is less than the {} required properties", path,
                              counts.second, n_required);
    if (!additional && counts.first > int32_t(listed.size()))
      return invalid_argument("{}: minProperties {} asks for more properties than the schema allows ({})",
                              path, counts.first, listed.size());
    const std::optional<NodeId> members = object_members(listed, additional, counts.first, counts.second);
    if (!members)
      return invalid_argument(
          "{}: no object has a number of properties that minProperties / maxProperties allow", path);
    return *members;
  }

  Result<std::vector<std::string>> required_keys(const Json& schema, const std::string& path) {
    std::vector<std::string> keys;
    if (!schema.contains("required")) return keys;
    const Json& required = schema["required"];
    if (!required.is_array()) return invalid_argument("{}.required: must be a list of property names", path);
    for (const Json& key : required) {
      if (!key.is_string()) return invalid_argument("{}.required: must be a list of property names", path);
      if (std::find(keys.begin(), keys.end(), key.get<std::string>()) == keys.end())
        keys.push_back(key.get<std::string>());
    }
    return keys;
  }

  // The value node for keys beyond the listed ones, or nullopt when no other key is allowed.
  Result<std::optional<NodeId>> additional_value(const Json& schema, bool has_properties,
                                                 const std::string& path) {
    if (!schema.contains("additionalProperties")) {
      if (has_properties && options_.strict_properties) return std::optional<NodeId>();
      return std::optional<NodeId>(syntax_.any_value());
    }
    const Json& additional = schema["additionalProperties"];
    if (additional.is_boolean())
      return additional.get<bool>() ? std::optional<NodeId>(syntax_.any_value()) : std::optional<NodeId>();
    if (!additional.is_object()) return invalid_argument("{}.additionalProperties: must be a schema", path);
    RILL_ASSIGN_OR_RETURN(NodeId value, compile_nested(additional, path + ".additionalProperties"));
    return std::optional<NodeId>(value);
  }

  // The key as Python's json.dumps(key, ensure_ascii=False) writes it: nlohmann's dump escapes the same set.
  Result<std::string> key_literal(const std::string& key, const std::string& path) {
    try {
      return Json(key).dump();
    } catch (const Json::exception&) {
      return invalid_argument("{}: the property name is not valid UTF-8", path);
    }
  }

  // "{" members "}" where listed keys come in order (required ones always, optional ones maybe), then
  // additional pairs; [min_members, max_members] members in all (max -1: unbounded). Built back to front:
  // rest[c] is what may come from property i on once c members were written (the next one takes a comma
  // when c > 0), or nullopt when no way on meets the counts: such branches are left out, so no prefix leads
  // into a dead end. Counts past `cap` behave alike, so without minProperties / maxProperties two nodes per
  // property remain and the grammar stays linear in the number of properties whatever subset appears.
  std::optional<NodeId> object_members(const std::vector<Property>& listed, std::optional<NodeId> additional,
                                       int32_t min_members, int32_t max_members) {
    const int32_t n = int32_t(listed.size());
    const int32_t cap = std::min(n, std::max(1, max_members >= 0 ? max_members : min_members));
    auto key = [&](int32_t c) { return std::min(c, cap); };
    std::vector<std::optional<NodeId>> rest(size_t(cap) + 1);
    const NodeId pair = additional ? syntax_.member(syntax_.any_string(), *additional) : -1;
    for (int32_t c = 0; c <= cap; ++c) {
      // After the listed keys: additional pairs for what the counts still ask and allow. At the cap with no
      // maximum, c stands for "c or more", which needs no more than c does.
      const int32_t need = std::max(0, min_members - c), room = max_members >= 0 ? max_members - c : -1;
      if (!additional) {
        if (need == 0) rest[size_t(c)] = b_.empty();
      } else if (room < 0 || need <= room) {
        rest[size_t(c)] =
            c == 0 ? syntax_.list(pair, need, room) : b_.repeat(b_.seq({syntax_.comma(), pair}), need, room);
      }
    }
    for (auto it = listed.rbegin(); it != listed.rend(); ++it) {
      const NodeId member = syntax_.member(b_.bytes(it->key_text), it->value);
      const NodeId after_comma = b_.seq({syntax_.comma(), member});
      std::vector<std::optional<NodeId>> before(rest.size());
      for (int32_t c = 0; c <= cap; ++c) {
        std::vector<NodeId> ways;
        const bool room = max_members < 0 || c < max_members;
        if (room && rest[size_t(key(c + 1))])
          ways.push_back(b_.seq({c == 0 ? member : after_comma, *rest[size_t(key(c + 1))]}));
        if (!it->required && rest[size_t(c)]) ways.push_back(*rest[size_t(c)]);
        if (!ways.empty()) before[size_t(c)] = b_.alt(std::move(ways));
      }
      rest = std::move(before);
    }
    if (!rest[0]) return std::nullopt;
    return b_.seq({b_.bytes("{"), *rest[0], b_.bytes("}")});
  }

  // ---- array ----

  Result<NodeId> compile_array(const Json& schema, const std::string& path) {
    RILL_ASSIGN_OR_RETURN(auto count_bounds, bounds(schema, "minItems", "maxItems", path));
    auto [min_items, max_items] = count_bounds;
    if (schema.contains("uniqueItems")) {
      if (!schema["uniqueItems"].is_boolean())
        return invalid_argument("{}.uniqueItems: must be a boolean", path);
      if (schema["uniqueItems"].get<bool>() && (max_items < 0 || max_items > 1))
        return invalid_argument(
            "{}.uniqueItems: true is not supported (a grammar cannot keep items distinct) unless maxItems <= "
            "1",
            path);
    }

    // Tuple positions: prefixItems (2020-12) with `items` for the rest, or `items` as a list (older drafts)
    // with additionalItems for the rest.
    const Json* prefix = nullptr;
    std::string prefix_path, rest_key = "items";
    if (schema.contains("prefixItems")) {
      prefix = &schema["prefixItems"];
      prefix_path = path + ".prefixItems";
    } else if (schema.contains("items") && schema["items"].is_array()) {
      prefix = &schema["items"];
      prefix_path = path + ".items";
      rest_key = "additionalItems";
    }
    if (prefix && !prefix->is_array()) return invalid_argument("{}: must be a list of schemas", prefix_path);

    std::vector<NodeId> positions;
    bool rest_allowed = true;
    for (size_t i = 0; prefix && i < prefix->size(); ++i) {
      if (max_items >= 0 && int32_t(i) >= max_items) break;
      const Json& sub = (*prefix)[i];
      // `false` at position i: nothing can stand there, so the array ends before it.
      if (sub.is_boolean() && !sub.get<bool>()) {
        rest_allowed = false;
        break;
      }
      RILL_ASSIGN_OR_RETURN(NodeId node, compile_nested(sub, fmt::format("{}[{}]", prefix_path, i)));
      positions.push_back(node);
    }

    std::optional<NodeId> rest;
    if (rest_allowed) {
      if (!schema.contains(rest_key)) {
        rest = syntax_.any_value();
      } else if (!(schema[rest_key].is_boolean() && !schema[rest_key].get<bool>())) {
        RILL_ASSIGN_OR_RETURN(NodeId node, compile_nested(schema[rest_key], path + "." + rest_key));
        rest = node;
      }
    }
    const int32_t n_positions = int32_t(positions.size());
    if (!rest && min_items > n_positions)
      return invalid_argument("{}: minItems {} asks for more items than the schema allows ({})", path,
                              min_items, n_positions);
    return array_items(positions, rest, min_items, max_items);
  }

  // "[" items "]": the tuple positions in order (the array may end after any of them once minItems is
  // met), then `rest` items up to maxItems. Built back to front like object_members.
  NodeId array_items(const std::vector<NodeId>& positions, std::optional<NodeId> rest, int32_t min_items,
                     int32_t max_items) {
    const int32_t n_positions = int32_t(positions.size());
    const int32_t rest_min = std::max(min_items - n_positions, 0);
    const int32_t rest_max = !rest ? 0 : max_items < 0 ? -1 : max_items - n_positions;
    NodeId tail = b_.empty();
    if (rest && rest_max != 0) {
      tail = n_positions == 0 ? syntax_.list(*rest, rest_min, rest_max)
                              : b_.repeat(b_.seq({syntax_.comma(), *rest}), rest_min, rest_max);
    }
    for (int32_t i = n_positions - 1; i >= 0; --i) {
      const NodeId item = i == 0 ? b_.seq({positions[size_t(i)], tail})
                                 : b_.seq({syntax_.comma(), positions[size_t(i)], tail});
      tail = i >= min_items ? b_.optional(item) : item;
    }
    return b_.seq({b_.bytes("["), tail, b_.bytes("]")});
  }

  GrammarBuilder& b_;
  JsonSyntax syntax_;
  const Json& root_;
  JsonGrammarOptions options_;
  std::map<std::string, NodeId> ref_rules_;  // "$ref" text -> its rule (declared before its body compiles)
  std::vector<std::string> unguarded_refs_;  // refs entered since the last '{' or '['
  int depth_ = 0;
};

}  // namespace

Result<NodeId> json_schema_node(GrammarBuilder& b, const nlohmann::ordered_json& schema,
                                const JsonGrammarOptions& options) {
  try {
    SchemaCompiler compiler(b, schema, options);
    return compiler.compile(schema, "schema");
  } catch (const Json::exception& e) {
    // A nlohmann accessor met a shape it did not expect: still the schema's fault, reported as such.
    return invalid_argument("schema: {}", e.what());
  }
}

NodeId json_value_node(GrammarBuilder& b, const JsonGrammarOptions& options) {
  return JsonSyntax(b, options).any_value();
}

NodeId json_object_node(GrammarBuilder& b, const JsonGrammarOptions& options) {
  return JsonSyntax(b, options).any_object();
}

Result<std::shared_ptr<const Grammar>> json_grammar(const Json* schema, const JsonGrammarOptions& options) {
  GrammarBuilder b;
  NodeId root = -1;
  if (schema) {
    RILL_ASSIGN_OR_RETURN(root, json_schema_node(b, *schema, options));
  } else {
    root = json_object_node(b, options);
  }
  return b.build(root);
}

}  // namespace rill::text::constraint
