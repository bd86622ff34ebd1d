// JSON Schema -> grammar against hand-written expectations: each case lists texts that JSON Schema accepts
// (and that the grammar's documented choices allow: key order as in `properties`, one optional space after
// ',' and ':') and texts it must reject. Then random walks through a few grammars, each text checked with
// nlohmann's parser and a hand-written predicate for its schema. RILL_TEST_SEED=N replays the walks.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_seed.h"
#include "text/constraint/json_schema.h"

namespace rill::text::constraint {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const Grammar> schema_grammar(std::string_view schema,
                                              const JsonGrammarOptions& options = {}) {
  GrammarBuilder b;
  Result<NodeId> node = json_schema_node(b, Json::parse(schema), options);
  if (!node.ok()) {
    ADD_FAILURE() << "compiling " << schema << ": " << node.status().to_string();
    return nullptr;
  }
  auto g = b.build(*node);
  if (!g.ok()) {
    ADD_FAILURE() << "building " << schema << ": " << g.status().to_string();
    return nullptr;
  }
  return *g;
}

bool accepts(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g);
  return m.advance_bytes(text) && m.is_complete();
}

void expect_language(std::string_view schema, const std::vector<std::string>& valid,
                     const std::vector<std::string>& invalid, const JsonGrammarOptions& options = {}) {
  SCOPED_TRACE(std::string(schema));
  const auto g = schema_grammar(schema, options);
  ASSERT_TRUE(g);
  for (const std::string& text : valid) EXPECT_TRUE(accepts(g, text)) << "should accept: " << text;
  for (const std::string& text : invalid) EXPECT_FALSE(accepts(g, text)) << "should reject: " << text;
}

// The error message of a schema that must not compile ("" when it compiled).
std::string compile_error(std::string_view schema) {
  GrammarBuilder b;
  Result<NodeId> node = json_schema_node(b, Json::parse(schema));
  return node.ok() ? "" : node.status().message();
}

const JsonGrammarOptions kCompact{.space_after_separators = false};

// ---- objects ----

TEST(JsonSchema, RequiredAndOptionalPropertiesInEverySubset) {
  const char* schema = R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                           "c": {"type": "boolean"}}, "required": ["b"]})";
  const auto g = schema_grammar(schema);
  ASSERT_TRUE(g);
  const std::vector<std::string> members = {R"("a":1)", R"("b":"x")", R"("c":true)"};
  for (int subset = 0; subset < 8; ++subset) {
    std::string text = "{";
    for (int i = 0; i < 3; ++i) {
      if (!(subset & (1 << i))) continue;
      if (text.size() > 1) text += ",";
      text += members[size_t(i)];
    }
    text += "}";
    const bool has_required_b = subset & 2;
    EXPECT_EQ(accepts(g, text), has_required_b) << text;
  }
  for (const char* bad : {R"({,"b":"x"})", R"({"b":"x",})", R"({"a":1,,"b":"x"})", R"({"a":1"b":"x"})",
                          R"({"b":"x","b":"x"})", R"({"b":"x"}})", R"({"b":x})", R"({"b":1})", "{"})
    EXPECT_FALSE(accepts(g, bad)) << bad;

  expect_language(R"({"type": "object", "properties": {"a": {}, "b": {}}})",
                  {"{}", R"({"a":1})", R"({"b":[]})", R"({"a":null,"b":{"c":"d"}})"},
                  {R"({,})", R"({"a":1,})", R"({"c":1})"});
  expect_language(R"({"type": "object", "properties": {"a": {"type": "null"}, "b": {"type": "null"}},
                      "required": ["a", "b"]})",
                  {R"({"a":null,"b":null})"}, {"{}", R"({"a":null})", R"({"b":null})"});
}

// Two nodes per property: 40 optional properties stay a small grammar, and any subset still matches.
TEST(JsonSchema, ManyOptionalPropertiesStayLinear) {
  Json schema = {{"type", "object"}, {"properties", Json::object()}};
  for (int i = 0; i < 40; ++i) schema["properties"]["p" + std::to_string(i)] = {{"type", "integer"}};
  GrammarBuilder b;
  const auto g = *b.build(*json_schema_node(b, schema));
  EXPECT_LT(g->size(), 600u);
  std::string every_third = "{";
  for (int i = 0; i < 40; i += 3) every_third += (i ? "," : "") + fmt::format(R"("p{}":{})", i, i);
  every_third += "}";
  EXPECT_TRUE(accepts(g, every_third)) << every_third;
  EXPECT_TRUE(accepts(g, R"({"p39":1})"));
  EXPECT_FALSE(accepts(g, R"({"p39":1,"p0":1})"));
}

// Key order follows `properties` (a documented choice: accepting every order is exponential).
TEST(JsonSchema, KeysComeInPropertiesOrder) {
  expect_language(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}})",
                  {R"({"a":1,"b":"x"})", R"({"b":"x"})"}, {R"({"b":"x","a":1})", R"({"a":1,"a":2})"});
}

TEST(JsonSchema, AdditionalProperties) {
  const char* listed = R"({"type": "object", "properties": {"a": {"type": "integer"}}})";
  expect_language(listed, {R"({"a":1})", "{}"}, {R"({"a":1,"z":2})", R"({"z":2})"});
  expect_language(listed, {R"({"a":1,"z":2})", R"({"z":[true]})", R"({"a":1,"y":{},"z":"s"})"},
                  {R"({"z":2,)"}, {.strict_properties = false});
  expect_language(
      R"({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": true})",
      {R"({"a":1,"z":2})", R"({"z":null})"}, {});
  expect_language(
      R"({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": false})",
      {R"({"a":1})"}, {R"({"a":1,"z":2})"}, {.strict_properties = false});
  expect_language(R"({"type": "object", "properties": {"a": {"type": "integer"}},
                      "additionalProperties": {"type": "integer"}})",
                  {R"({"a":1,"z":2})", R"({"z":2,"y":3})", R"({"é\n":4})"},
                  {R"({"a":1,"z":"s"})", R"({"z":2,"a":1.5})"});
  // Without `properties`: any keys, values per additionalProperties when it is a schema.
  expect_language(R"({"type": "object"})", {"{}", R"({"k":[1,{"x":null}],"":"v"})"},
                  {"[]", R"({"k"})", R"({1:2})"});
  expect_language(R"({"type": "object", "additionalProperties": {"type": "string"}})",
                  {"{}", R"({"a":"x","b":"y"})"}, {R"({"a":1})"});
  expect_language(R"({"type": "object", "additionalProperties": false})", {"{}"}, {R"({"a":1})"});
  // Required keys that `properties` does not list take any value, after the listed ones.
  expect_language(
      R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "extra"]})",
      {R"({"a":1,"extra":[1,2]})", R"({"a":1,"extra":"x"})"}, {R"({"a":1})", R"({"extra":1})"});
  // A property whose schema is `false` may not appear.
  expect_language(R"({"properties": {"a": false, "b": {"type": "null"}}})", {R"({"b":null})", "{}"},
                  {R"({"a":1,"b":null})", R"({"a":1})"});
}

// ---- arrays ----

TEST(JsonSchema, ArraysWithItemsAndCounts) {
  expect_language(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})",
                  {"[1]", "[1,2,3]", "[-1,0]"}, {"[]", "[1,2,3,4]", "[1,]", "[,1]", "[\"a\"]", "[1 2]", "["});
  expect_language(
      R"({"type": "array", "items": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
                      "minItems": 2})",
      {"[[],[true,false]]", "[[true],[],[false,false]]"}, {"[[true,true,true],[]]", "[[]]", "[[],[1]]"});
  expect_language(R"({"type": "array"})", {"[]", R"([1,"a",{"b":[]},null])"}, {"[1,]", "{}"});
  expect_language(R"({"type": "array", "maxItems": 0})", {"[]"}, {"[1]"});
}

TEST(JsonSchema, TupleArrays) {
  expect_language(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                      "items": {"type": "null"}})",
                  {"[]", R"(["a"])", R"(["a",1])", R"(["a",1,null,null])"},
                  {"[1]", R"(["a","b"])", R"(["a",1,2])", R"(["a",,1])"});
  expect_language(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                      "items": false, "minItems": 1})",
                  {R"(["a"])", R"(["a",1])"}, {"[]", R"(["a",1,null])"});
  expect_language(
      R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "maxItems": 1})",
      {"[]", R"(["a"])"}, {R"(["a",1])"});
  expect_language(R"({"type": "array", "prefixItems": [{"type": "string"}], "minItems": 3})",
                  {R"(["a",1,{}])", R"(["a",1,2,3])"}, {R"(["a",1])", "[1,2,3]"});
  // Older drafts: `items` as a list, additionalItems for the rest.
  expect_language(
      R"({"type": "array", "items": [{"type": "integer"}], "additionalItems": {"type": "string"}})",
      {"[1]", R"([1,"a","b"])"}, {R"([1,2])", R"(["a"])"});
}

// ---- scalars ----

TEST(JsonSchema, IntegerAndNumberSyntax) {
  expect_language(R"({"type": "integer"})", {"0", "-0", "7", "-12", "1234567890123"},
                  {"01", "-", "1.0", "1e5", "+1", "\"1\"", "00", "-01", " 1", ""});
  expect_language(
      R"({"type": "number"})", {"0", "-0", "1.5", "1e5", "1E+5", "1.5E-3", "-0.0", "10", "0.001e-07"},
      {"01", "1.", ".5", "-", "1e", "1e+", "+1", "0x1", "1.5.5", "NaN", "Infinity", "1e5.0", "-.5"});
  expect_language(R"({"type": "boolean"})", {"true", "false"}, {"True", "tru", "1", "null"});
  expect_language(R"({"type": "null"})", {"null"}, {"nul", "None", "\"null\""});
}

TEST(JsonSchema, StringEscapes) {
  expect_language(R"({"type": "string"})",
                  {R"("")", R"("\"\\\/\b\f\n\r\t")", R"("\u00e9")", R"("\u00E9\u0000")", R"("\uD834\uDD1E")",
                   R"("a\ud83d\ude00b")"},
                  {R"("\a")", R"("\'")", R"("\u00e")", R"("\u12G4")", R"("\")", R"("\uD834")", R"("\uDD1E")",
                   R"("\uD834\u0041")", "\"a\nb\"", "\"tab\there\"", "\"\x01\"", R"("a"b")"});
}

TEST(JsonSchema, Utf8IsWellFormed) {
  expect_language(R"({"type": "string"})", {"\"é\"", "\"€\"", "\"𝄞\"", "\"日本語 🎉\"", "\"\x7f\""},
                  {"\"\xC0\xAF\"", "\"\x80\"", "\"a\xBF\"", "\"\xED\xA0\x80\"", "\"\xF4\x90\x80\x80\"",
                   "\"\xE2\x82\"", "\"\xF5\x80\x80\x80\"", "\"\xFF\""});
  expect_language(R"({"type": "object", "properties": {"名前": {"type": "string"},
                      "emoji🎉": {"type": "string", "maxLength": 2}}, "required": ["名前"]})",
                  {R"({"名前":"東京"})", R"({"名前":"a","emoji🎉":"🎉é"})"},
                  {R"({"名前":"a","emoji🎉":"🎉éx"})", R"({"\u540d\u524d":"a"})", R"({"emoji🎉":""})"});
}

TEST(JsonSchema, StringLengthCountsCharacters) {
  expect_language(
      R"({"type": "string", "minLength": 2, "maxLength": 3})",
      {R"("ab")", R"("abc")", R"("\n\t")", R"("a\u00e9")", R"("éé")", R"("日本語")", R"("\uD834\uDD1Ex")"},
      {R"("a")", R"("abcd")", R"("\u00e9")", R"("")", R"("日本語x")", R"("\uD834\uDD1E")"});
  expect_language(R"({"type": "string", "maxLength": 0})", {R"("")"}, {R"("a")"});
  expect_language(R"({"type": "string", "minLength": 1})", {R"("a")", R"("a long one")"}, {R"("")"});
}

// ---- bounds, patterns, formats, counts (the keywords that only narrow values) ----

TEST(JsonSchema, IntegerBounds) {
  // The bug: `maximum: 7` was ignored and the model wrote 9640010098050097597.
  expect_language(R"({"type": "integer", "minimum": 1, "maximum": 7})", {"1", "4", "7"},
                  {"0", "8", "9640010098050097597", "-1", "07", "70", "1.0"});
  expect_language(R"({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10})", {"1", "9"},
                  {"0", "10", "-0"});
  expect_language(R"({"type": "integer", "minimum": 0.5, "maximum": 3.5})", {"1", "3"}, {"0", "4"});
  expect_language(R"({"type": "integer", "minimum": -3.5, "exclusiveMaximum": -1})", {"-3", "-2"},
                  {"-4", "-1", "0"});
  // Draft 4: a boolean exclusiveMinimum makes `minimum` exclusive; with both forms, the tighter bound wins.
  expect_language(R"({"type": "integer", "minimum": 0, "exclusiveMinimum": true})", {"1", "12"}, {"0", "-1"});
  expect_language(R"({"type": "integer", "minimum": 5, "exclusiveMinimum": 5})", {"6"}, {"5"});
  expect_language(R"({"type": "integer", "minimum": 6, "exclusiveMinimum": 5})", {"6"}, {"5"});
  expect_language(R"({"type": "integer", "format": "int32"})", {"2147483647", "-2147483648", "0"},
                  {"2147483648", "-2147483649"});
  expect_language(R"({"type": "integer", "format": "int64", "minimum": 0})", {"9223372036854775807"},
                  {"9223372036854775808", "-1"});
  expect_language(R"({"type": "integer", "maximum": 1e30})", {"1000000000000000000000000000000", "-5"},
                  {"1000000000000000000000000000001"});
  expect_language(R"({"type": "integer", "multipleOf": 1, "minimum": 2})", {"2"}, {"1"});
  expect_language(R"({"type": "number", "multipleOf": 1})", {"2", "-3"}, {"2.5", "1e3"});
}

TEST(JsonSchema, NumberBounds) {
  expect_language(R"({"type": "number", "minimum": -90, "maximum": 90})",
                  {"-90", "90", "0.5", "-89.999", "45", "90.000", "0"},
                  {"90.0001", "-91", "1e1", "100", "-90.5"});
  expect_language(R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})",
                  {"0.5", "0.0001", "0.999"}, {"0", "1", "1.0", "0.0", "-0.5"});
  expect_language(R"({"type": "number", "minimum": 0.25})", {"0.25", "0.250", "0.3", "7", "1234.5"},
                  {"0.2", "0.249", "-1", "0.05"});
  expect_language(R"({"type": ["number", "null"], "maximum": -1.5})", {"-1.5", "-2", "null"}, {"-1.4", "0"});
  // No `type`: numeric keywords mean a number.
  expect_language(R"({"minimum": 1, "maximum": 2})", {"1", "1.5"}, {"3", "\"1\"", "null"});
}

TEST(JsonSchema, PatternsAndFormats) {
  expect_language(R"({"type": "string", "pattern": "^[A-Z]{3}$"})", {R"("ABC")"},
                  {R"("ABCD")", R"("abc")", R"("")"});
  expect_language(R"({"type": "string", "pattern": "^[a-z]+$", "maxLength": 3})", {R"("abc")"},
                  {R"("abcd")"});
  expect_language(R"({"type": "string", "pattern": "a\\.b"})", {R"("a.b")"}, {R"("axb")"});
  expect_language(R"({"type": "string", "format": "date"})", {R"("2024-02-29")", R"("2000-02-29")"},
                  {R"("2023-02-29")", R"("1900-02-29")", R"("x")"});
  expect_language(R"({"type": "string", "format": "uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"},
                  {R"("123e4567e89b12d3a456426614174000")"});
  expect_language(R"({"format": "email"})", {R"("a.b@example.org")"},
                  {R"("a@b")", "1"});  // no type: a string
  expect_language(R"({"type": ["string", "integer"], "format": "int32"})", {R"("any")", "5"}, {"2147483648"});
  expect_language(R"({"type": "number", "format": "double"})", {"1.5e300"}, {R"("1")"});
}

TEST(JsonSchema, PropertyCounts) {
  const char* schema =
      R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                           "c": {"type": "integer"}}, "minProperties": 2, "maxProperties": 2})";
  const auto g = schema_grammar(schema);
  ASSERT_TRUE(g);
  for (int subset = 0; subset < 8; ++subset) {
    std::string text = "{";
    int n = 0;
    for (int i = 0; i < 3; ++i) {
      if (!(subset & (1 << i))) continue;
      text += (n++ ? "," : "") + fmt::format(R"("{}":{})", char('a' + i), i);
    }
    text += "}";
    EXPECT_EQ(accepts(g, text), n == 2) << text;
  }
  expect_language(R"({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1,
                      "maxProperties": 2})",
                  {R"({"x":1})", R"({"x":1,"y":2})"}, {"{}", R"({"x":1,"y":2,"z":3})"});
  expect_language(
      R"({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": true,
                      "minProperties": 3})",
      {R"({"a":1,"b":2,"c":3})", R"({"b":2,"c":3,"d":4,"e":5})"}, {R"({"a":1,"b":2})", "{}"});
  expect_language(R"({"minProperties": 1})", {R"({"k":null})"}, {"{}", "1"});
  const std::string too_many = compile_error(R"({"type": "object", "properties": {"a": {}, "b": {}},
                                                "required": ["a", "b"], "maxProperties": 1})");
  EXPECT_NE(too_many.find("maxProperties 1"), std::string::npos) << too_many;
  const std::string too_few = compile_error(R"({"properties": {"a": {}}, "additionalProperties": false,
                                               "minProperties": 2})");
  EXPECT_NE(too_few.find("minProperties 2"), std::string::npos) << too_few;
}

TEST(JsonSchema, UniqueItems) {
  expect_language(R"({"type": "array", "uniqueItems": false})", {"[1,1]"}, {});
  expect_language(R"({"type": "array", "uniqueItems": true, "maxItems": 1})", {"[]", "[1]"}, {"[1,2]"});
  EXPECT_NE(compile_error(R"({"type": "array", "items": {"type": "integer"}, "uniqueItems": true})")
                .find("schema.uniqueItems: true is not supported"),
            std::string::npos);
}

// The compiler never drops a keyword silently: what it does not implement is an error naming the keyword
// and its schema path; annotations are accepted.
TEST(JsonSchema, UnsupportedKeywordsAreErrors) {
  EXPECT_EQ(compile_error(R"({"not": {"type": "string"}})"), R"(schema: keyword "not" is not supported)");
  EXPECT_EQ(compile_error(R"({"type": "object", "properties": {"n": {"type": "integer", "maximun": 7}}})"),
            R"(schema.properties.n: keyword "maximun" is not supported)");
  for (const char* keyword : {"if", "patternProperties", "propertyNames", "contains", "dependentRequired",
                              "unevaluatedProperties", "$dynamicRef"}) {
    const std::string error = compile_error(fmt::format(R"({{"type": "object", "{}": {{}}}})", keyword));
    EXPECT_EQ(error, fmt::format(R"(schema: keyword "{}" is not supported)", keyword)) << keyword;
  }
  EXPECT_EQ(compile_error(R"({"$defs": {"x": {"type": "integer"}}, "$ref": "#/$defs/x", "minimum": 1})"),
            R"(schema: "minimum" next to "$ref" is not supported)");
  EXPECT_EQ(compile_error(R"({"anyOf": [{"type": "integer"}], "type": "integer"})"),
            R"(schema: "type" next to "anyOf" is not supported)");
  EXPECT_EQ(compile_error(R"({"anyOf": [{"type": "integer"}], "oneOf": [{"type": "integer"}]})"),
            R"(schema: "oneOf" next to "anyOf" is not supported)");
  EXPECT_EQ(compile_error(R"({"enum": ["a", "bb"], "maxLength": 1})"),
            R"(schema: "maxLength" next to "enum" is not supported)");
  EXPECT_EQ(compile_error(R"({"type": "number", "multipleOf": 0.5})"),
            "schema.multipleOf: 0.5 is not supported (only 1: a grammar cannot check divisibility)");
  EXPECT_NE(compile_error(R"({"type": "string", "format": "duration"})")
                .find(R"(schema.format: "duration" is not supported)"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "integer", "format": "date"})").find("schema.format"),
            std::string::npos);
  EXPECT_NE(compile_error(R"js({"type": "string", "pattern": "(?=a)"})js").find("schema.pattern: lookahead"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "string", "pattern": 5})").find("schema.pattern: must be a string"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "string", "pattern": "a", "format": "date"})")
                .find("pattern together with format"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "integer", "minimum": 5, "maximum": 4})").find("no number lies"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "integer", "minimum": 4.2, "maximum": 4.8})").find("no integer lies"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "integer", "minimum": "1"})").find("schema.minimum: must be a number"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "integer", "exclusiveMaximum": true})").find("true needs maximum"),
            std::string::npos);
  // Annotations, $defs containers and OpenAPI extensions change nothing.
  expect_language(R"({"type": "string", "title": "t", "description": "d", "default": "x", "examples": ["a"],
                      "$comment": "c", "deprecated": true, "readOnly": false, "x-order": 1, "nullable": true,
                      "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "s", "example": "e"})",
                  {R"("a")"}, {"null", "1"});
}

// ---- enum / const ----

TEST(JsonSchema, EnumValuesAsCompactJson) {
  expect_language(
      R"({"enum": ["plain", "quo\"te", "back\\slash", "new\nline", "tab\t", "ctl\u0001", "é",
                               1, 2.5, 1.0, null, true, {"k": [1, "v"]}]})",
      {R"("plain")", R"("quo\"te")", R"("back\\slash")", R"("new\nline")", R"("tab\t")", R"("ctl\u0001")",
       "\"é\"", "1", "2.5", "1.0", "null", "true", R"({"k":[1,"v"]})"},
      // One spelling per value (documented): no \u00e9 for é, no 2.50, no spaces inside objects.
      {R"("plain ")", "\"new\nline\"", R"("\u00e9")", "2.50", R"({"k": [1, "v"]})", "false", R"("1")"});
  expect_language(R"({"const": "x"})", {R"("x")"}, {R"("y")", "x"});
  expect_language(R"({"const": {"a": [null]}})", {R"({"a":[null]})"}, {"{}"});
  // With a `type`, only the enum values of that type remain.
  expect_language(R"({"type": "string", "enum": ["a", 1]})", {R"("a")"}, {"1"});
  expect_language(R"({"type": "integer", "enum": [1, 2.0, 2.5]})", {"1", "2.0"}, {"2.5", "2"});
}

// ---- combinations and references ----

TEST(JsonSchema, AnyOfOneOfAndTypeLists) {
  for (const char* keyword : {"anyOf", "oneOf"})
    expect_language(fmt::format(R"({{"{}": [{{"type": "string"}}, {{"type": "integer"}}]}})", keyword),
                    {R"("a")", "5", "-3", R"("")"}, {"5.5", "null", "true", R"("a)", "[]"});
  expect_language(R"({"type": ["string", "null"]})", {R"("a")", "null"}, {"1", "{}"});
  expect_language(R"({"type": ["integer", "number"]})", {"1", "1.5"}, {"\"1\""});
  expect_language(R"({"allOf": [{"type": "integer"}]})", {"3"}, {"3.5"});
  expect_language(R"({"anyOf": [false, {"type": "null"}]})", {"null"}, {"1"});
}

TEST(JsonSchema, RecursiveRefs) {
  expect_language(
      R"({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
                      "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["value"]}},
                      "$ref": "#/$defs/node"})",
      {R"({"value":1})", R"({"value":1,"children":[]})",
       R"({"value":1,"children":[{"value":2,"children":[{"value":3}]},{"value":4}]})"},
      {R"({"value":1,"children":[{}]})", R"({"value":1,"children":[{"value":"x"}]})", R"({"children":[]})"});
  expect_language(R"({"type": "object", "properties": {"next": {"$ref": "#"}}})",
                  {"{}", R"({"next":{"next":{}}})"}, {R"({"next":null})"});
  expect_language(R"({"$defs": {"list": {"anyOf": [{"type": "null"}, {"type": "object",
                      "properties": {"head": {"type": "integer"}, "tail": {"$ref": "#/$defs/list"}},
                      "required": ["head", "tail"]}]}}, "$ref": "#/$defs/list"})",
                  {"null", R"({"head":1,"tail":{"head":2,"tail":null}})"},
                  {R"({"head":1})", R"({"head":1,"tail":1})"});
  // definitions, and JSON pointer escapes (~1 is '/', ~0 is '~').
  expect_language(R"({"definitions": {"a/b": {"type": "integer"}, "t~n": {"type": "string"}}, "type": "array",
                      "prefixItems": [{"$ref": "#/definitions/a~1b"}, {"$ref": "#/definitions/t~0n"}],
                      "items": false, "minItems": 2})",
                  {R"([1,"x"])"}, {R"(["x",1])", "[1]"});
  // The same target used twice compiles once and matches the same.
  expect_language(
      R"({"$defs": {"p": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}],
                      "items": false, "minItems": 2}}, "type": "object",
                      "properties": {"from": {"$ref": "#/$defs/p"}, "to": {"$ref": "#/$defs/p"}}})",
      {R"({"from":[0,1],"to":[2.5,3]})"}, {R"({"from":[0],"to":[1,2]})"});
}

// ---- any value, inferred types and separators ----

TEST(JsonSchema, AnyValueSchemas) {
  const std::vector<std::string> values = {
      "1",       "-2.5e3", R"("s")", "true", "null", "[]", "{}", R"({"a":[1,{"b":null}],"c":"\u00e9"})",
      "[[[[]]]]"};
  const std::vector<std::string> not_values = {"", "[1,]", "{\"a\"}", "tru", "'s'", "{}{}", "01", "[1]]"};
  for (const char* schema : {"{}", "true", R"({"description": "anything", "title": "t", "$comment": "c"})"})
    expect_language(schema, values, not_values);
  expect_language(R"({"properties": {"a": {"type": "integer"}}})", {R"({"a":1})", "{}"}, {"1", "[]"});
  expect_language(R"({"items": {"type": "integer"}})", {"[1,2]"}, {"1", "{}"});

  GrammarBuilder b;
  const NodeId value = json_value_node(b);
  const NodeId object = json_object_node(b, kCompact);
  const auto value_grammar = *b.build(value);
  const auto object_grammar = *b.build(object);
  for (const std::string& text : values) EXPECT_TRUE(accepts(value_grammar, text)) << text;
  for (const std::string& text : not_values) EXPECT_FALSE(accepts(value_grammar, text)) << text;
  EXPECT_TRUE(accepts(value_grammar, R"({"a": [1, 2], "b": {}})"));
  EXPECT_TRUE(accepts(object_grammar, R"({"a":[1,2],"b":{}})"));
  for (const char* text : {"[]", "1", R"("a")", R"({"a": 1})"})
    EXPECT_FALSE(accepts(object_grammar, text)) << text;
}

TEST(JsonSchema, OneOptionalSpaceAfterSeparators) {
  const char* schema =
      R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array"}}})";
  const std::vector<std::string> spaced = {R"({"a": 1, "b": [1, 2]})", R"({"a": 1,"b":[1, {"c": 2}]})"};
  const std::vector<std::string> never = {
      R"({"a":  1})", R"({ "a":1})", R"({"a" :1})",     R"({"a":1 })",   "{\"a\":1,\n\"b\":[]}",
      "{\"a\":\n1}",  "{\"a\":1}\n", R"({"b":[1 ,2]})", R"({"b":[ 1]})", "{\"a\":\t1}"};
  std::vector<std::string> compact = {R"({"a":1,"b":[1,2]})", "{}"};
  std::vector<std::string> with_spaces = compact;
  with_spaces.insert(with_spaces.end(), spaced.begin(), spaced.end());
  expect_language(schema, with_spaces, never);
  std::vector<std::string> rejected_compact = never;
  rejected_compact.insert(rejected_compact.end(), spaced.begin(), spaced.end());
  expect_language(schema, compact, rejected_compact, kCompact);
}

// ---- errors name the schema path ----

TEST(JsonSchema, ErrorsNameThePath) {
  EXPECT_EQ(compile_error(R"({"type": "object", "properties": {"city": {"type": "str"}}})"),
            R"(schema.properties.city.type: unknown type "str")");
  const std::string empty_enum = compile_error(R"({"properties": {"color": {"enum": []}}})");
  EXPECT_NE(empty_enum.find("schema.properties.color.enum"), std::string::npos) << empty_enum;
  EXPECT_NE(empty_enum.find("empty enum"), std::string::npos) << empty_enum;
  const std::string missing = compile_error(R"({"properties": {"x": {"$ref": "#/$defs/missing"}}})");
  EXPECT_NE(missing.find("schema.properties.x.$ref"), std::string::npos) << missing;
  EXPECT_NE(missing.find("#/$defs/missing"), std::string::npos) << missing;
  EXPECT_EQ(compile_error("false"), "schema: the schema `false` accepts no value");
  const std::string never =
      compile_error(R"({"$defs": {"never": false}, "type": "array", "items": {"$ref": "#/$defs/never"}})");
  EXPECT_NE(never.find("schema.$defs.never: the schema `false`"), std::string::npos) << never;
  const std::string required_false = compile_error(R"({"properties": {"x": false}, "required": ["x"]})");
  EXPECT_NE(required_false.find("schema.properties.x"), std::string::npos) << required_false;
  EXPECT_EQ(compile_error(R"({"properties": {"p": {"allOf": [{"type": "integer"}, {"minimum": 0}]}}})"),
            "schema.properties.p.allOf: allOf with several schemas is not supported");
  const std::string cycle =
      compile_error(R"({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "string"}]}},
                                              "$ref": "#/$defs/a"})");
  EXPECT_NE(cycle.find("schema.$defs.a.anyOf[0].$ref"), std::string::npos) << cycle;
  EXPECT_NE(compile_error(R"({"$ref": "#"})"), "");
  const std::string lengths = compile_error(R"({"type": "string", "minLength": 5, "maxLength": 3})");
  EXPECT_NE(lengths.find("schema: minLength 5 is greater than maxLength 3"), std::string::npos) << lengths;
  EXPECT_NE(compile_error(R"({"type": "array", "minItems": -1})").find("schema.minItems"), std::string::npos);
  EXPECT_NE(compile_error(R"({"$ref": "https://example.com/s.json"})").find("schema.$ref"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": 5})").find("schema.type"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "array", "prefixItems": [{}], "items": false, "minItems": 2})")
                .find("minItems 2"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "integer", "enum": ["a"]})").find("schema.enum"), std::string::npos);
  EXPECT_EQ(compile_error(R"({"items": {"type": "str", "enum": ["a"]}})"),
            R"(schema.items.type: unknown type "str")");
}

// ---- random walks: every text the grammar completes is valid JSON that its schema accepts ----

size_t code_points(const std::string& utf8) {
  size_t n = 0;
  for (char c : utf8) n += (uint8_t(c) & 0xC0) != 0x80;
  return n;
}

// Integer syntax; nlohmann stores integers past 64 bits as whole doubles, so those count too.
bool is_integer(const Json& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::trunc(d) == d && std::abs(d) >= 9.2e18;
}

// The keys of `v` appear among `order`, in that order.
bool keys_in_order(const Json& v, const std::vector<std::string>& order) {
  size_t next = 0;
  for (const auto& [key, value] : v.items()) {
    while (next < order.size() && order[next] != key) ++next;
    if (next == order.size()) return false;
    ++next;
  }
  return true;
}

bool is_tree(const Json& v) {
  if (!v.is_object() || !keys_in_order(v, {"value", "children"}) || !v.contains("value") ||
      !v["value"].is_number())
    return false;
  if (!v.contains("children")) return true;
  const Json& children = v["children"];
  if (!children.is_array() || children.size() > 2) return false;
  return std::all_of(children.begin(), children.end(), is_tree);
}

// RFC 8259 puts no bound on numbers and neither does the grammar (nor xgrammar's), but nlohmann rejects
// doubles that overflow (1e400). The predicates only look at types, so exponents outside strings are cut to
// their last two digits before parsing; anything else that is not JSON still fails.
std::string with_short_exponents(const std::string& text) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    out.push_back(c);
    if (in_string) {
      if (c == '\\' && i + 1 < text.size()) out.push_back(text[++i]);
      if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == 'e' || c == 'E') {
      if (i + 1 < text.size() && (text[i + 1] == '+' || text[i + 1] == '-')) out.push_back(text[++i]);
      size_t end = i + 1;
      while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
      const size_t keep = std::min<size_t>(end - (i + 1), 2);
      out.append(text, end - keep, keep);
      i = end - 1;
    }
  }
  return out;
}

struct WalkCase {
  const char* name;
  const char* schema;
  JsonGrammarOptions options;
  std::function<bool(const Json&)> valid;
};

const std::vector<WalkCase>& walk_cases() {
  static const std::vector<WalkCase> cases = {
      {"person",
       R"({"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 8},
           "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
           "nick": {"type": ["string", "null"]}}, "required": ["name", "age"]})",
       {},
       [](const Json& v) {
         if (!v.is_object() || !keys_in_order(v, {"name", "age", "tags", "nick"})) return false;
         if (!v.contains("name") || !v["name"].is_string()) return false;
         const size_t n = code_points(v["name"].get<std::string>());
         if (n < 1 || n > 8 || !v.contains("age") || !is_integer(v["age"])) return false;
         if (v.contains("tags")) {
           const Json& tags = v["tags"];
           if (!tags.is_array() || tags.size() > 3) return false;
           if (!std::all_of(tags.begin(), tags.end(), [](const Json& t) { return t.is_string(); }))
             return false;
         }
         return !v.contains("nick") || v["nick"].is_string() || v["nick"].is_null();
       }},
      {"tree",
       R"({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "number"},
           "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
           "required": ["value"]}}, "$ref": "#/$defs/node"})",
       kCompact, is_tree},
      {"any_of",
       R"({"anyOf": [{"type": "string", "maxLength": 4}, {"type": "integer"}, {"type": "null"},
           {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 2}]})",
       {},
       [](const Json& v) {
         if (v.is_string()) return code_points(v.get<std::string>()) <= 4;
         if (v.is_array())
           return !v.empty() && v.size() <= 2 &&
                  std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_boolean(); });
         return v.is_null() || is_integer(v);
       }},
      // A random additional key can spell "id" again (the compiler allows it, json_schema.cc); such walks
      // are skipped below, since a parsed object keeps only one of the values.
      {"map",
       R"({"type": "object", "properties": {"id": {"enum": ["a\"b", "c\\d", "é", 7]}}, "required": ["id"],
           "additionalProperties": {"type": "number"}})",
       {},
       [](const Json& v) {
         if (!v.is_object() || v.empty() || v.begin().key() != "id") return false;
         const Json& id = v["id"];
         if (!(id == "a\"b" || id == "c\\d" || id == "é" || id == 7)) return false;
         return std::all_of(std::next(v.begin()), v.end(), [](const Json& x) { return x.is_number(); });
       }},
      {"bounded",
       R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": -5, "maximum": 1000},
           "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{2,4}$"}, "day": {"type": "string", "format": "date"},
           "x": {"type": "number", "exclusiveMinimum": 0, "maximum": 2.5}},
           "required": ["n", "code", "x"]})",
       {},
       [](const Json& v) {
         static const std::regex code("^[A-Z]{2}-[0-9]{2,4}$");
         if (!v.is_object() || !keys_in_order(v, {"n", "code", "day", "x"})) return false;
         if (!v.contains("n") || !v["n"].is_number_integer()) return false;
         const int64_t n = v["n"].get<int64_t>();
         if (n < -5 || n > 1000 || !v["x"].is_number()) return false;
         const double x = v["x"].get<double>();
         if (!(x > 0 && x <= 2.5) || !v["code"].is_string()) return false;
         if (!std::regex_match(v["code"].get<std::string>(), code)) return false;
         return !v.contains("day") || (v["day"].is_string() && v["day"].get<std::string>().size() == 10);
       }},
      {"counted", R"({"type": "object", "additionalProperties": {"type": "boolean"}, "minProperties": 1,
           "maxProperties": 3})",
       kCompact,
       [](const Json& v) {
         return v.is_object() && v.size() >= 1 && v.size() <= 3 &&
                std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_boolean(); });
       }},
      // Optional listed keys with a minimum count: no prefix may lead into a dead end (the walk fails if
      // the matcher offers a byte it cannot take).
      {"listed_counts",
       R"({"type": "object", "properties": {"a": {"type": "integer", "minimum": -99, "maximum": 99}, "b": {"type": "string", "maxLength": 3},
           "c": {"type": "boolean"}}, "minProperties": 2, "maxProperties": 2})",
       {},
       [](const Json& v) {
         return v.is_object() && v.size() == 2 && keys_in_order(v, {"a", "b", "c"}) &&
                (!v.contains("a") || v["a"].is_number_integer()) &&
                (!v.contains("b") || v["b"].is_string()) && (!v.contains("c") || v["c"].is_boolean());
       }},
      {"any", "{}", {}, [](const Json&) { return true; }},
      {"any_object", R"({"type": "object"})", kCompact, [](const Json& v) { return v.is_object(); }},
  };
  return cases;
}

// Walks the grammar byte by byte, each byte drawn among those the matcher accepts. Sometimes (and always past
// `soft_limit`) it prefers bytes that close a string or container, and past the limit avoids opening new
// ones, so walks end; a quarter of the draws keep to ASCII so escapes show up often.
std::string random_walk(const std::shared_ptr<const Grammar>& g, std::mt19937& rng, size_t soft_limit) {
  constexpr size_t kHardLimit = 4096;
  Matcher m(g);
  std::string text;
  while (text.size() < kHardLimit) {
    std::vector<int> next;
    for (int c = 0; c < 256; ++c)
      if (m.can_advance(c)) next.push_back(c);
    const bool late = text.size() >= soft_limit;
    if (m.is_complete() && (next.empty() || late || rng() % 4 == 0)) return text;
    if (next.empty()) break;
    auto keep = [&](auto pred) {
      std::vector<int> kept;
      std::copy_if(next.begin(), next.end(), std::back_inserter(kept), pred);
      if (!kept.empty()) next = std::move(kept);
    };
    if (late) keep([](int c) { return c != '{' && c != '[' && c != ',' && c != '\\'; });
    if (late || rng() % 8 == 0) keep([](int c) { return c == '}' || c == ']' || c == '"'; });
    if (rng() % 4 == 0) keep([](int c) { return c < 0x80; });
    const int c = next[rng() % next.size()];
    EXPECT_TRUE(m.advance(c));
    text.push_back(char(c));
  }
  ADD_FAILURE() << "walk did not complete: " << text;
  return text;
}

uint32_t walk_seed() {
  const uint32_t seed = rill::testing::test_seed();
  std::printf("[ json_schema ] random walks use seed %u (RILL_TEST_SEED=%u replays them)\n", seed, seed);
  return seed;
}

// Whether some object in the text repeats a key (nlohmann's parse would keep only the last value).
bool has_duplicate_key(const std::string& text) {
  std::vector<std::set<std::string>> keys;
  bool duplicate = false;
  const Json ignored = Json::parse(text, [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) keys.emplace_back();
    if (event == Json::parse_event_t::object_end) keys.pop_back();
    if (event == Json::parse_event_t::key && !keys.back().insert(parsed.get<std::string>()).second)
      duplicate = true;
    return true;
  });
  return duplicate;
}

TEST(JsonSchema, RandomWalksProduceValidJson) {
  const uint32_t seed = walk_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  for (const WalkCase& c : walk_cases()) {
    SCOPED_TRACE(c.name);
    const auto g = schema_grammar(c.schema, c.options);
    ASSERT_TRUE(g);
    for (int walk = 0; walk < 300; ++walk) {
      const std::string text = random_walk(g, rng, 24 + rng() % 64);
      const std::string parsable = with_short_exponents(text);
      if (!Json::accept(parsable)) {
        ADD_FAILURE() << "not JSON: " << text;
        continue;
      }
      if (has_duplicate_key(parsable)) continue;
      EXPECT_TRUE(c.valid(Json::parse(parsable))) << "schema rejects: " << text;
    }
  }
}

}  // namespace
}  // namespace rill::text::constraint
