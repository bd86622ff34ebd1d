// Grammar compilation is bounded (GrammarLimits, the pattern and schema depth limits, kMaxExpandWork):
// every limit refuses with an error naming the schema path and the limit, before the work or memory it
// guards is spent. Each schema here compiled (slowly, or crashed the stack) before the limits existed.
// Last, what a token mask costs for the largest grammars the limits allow, on the real Kimi vocabulary
// (printed, not asserted: the machine's speed is not the grammar's).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include <fmt/format.h>

#include "shared_data.h"
#include "text/constraint/grammar_constraint.h"
#include "text/constraint/json_schema.h"
#include "text/constraint/token_mask.h"

namespace rill::text::constraint {
namespace {

using Json = nlohmann::ordered_json;

// The error of compiling `schema` (empty when it compiles).
std::string compile_error(const Json& schema) {
  auto g = json_grammar(&schema);
  return g.ok() ? "" : std::string(g.status().message());
}

Json string_enum(size_t n) {
  Json values = Json::array();
  for (size_t i = 0; i < n; ++i) values.push_back(fmt::format("member-{}", i));
  return values;
}

TEST(GrammarLimits, EnumOfThreeHundredThousandStringsIsRefused) {
  const Json schema = {{"type", "object"},
                       {"properties", {{"city", {{"type", "string"}, {"enum", string_enum(300000)}}}}}};
  EXPECT_EQ(compile_error(schema), "schema.properties.city.enum: 300000 values exceed the limit of 4096");
  // At the limit it compiles.
  EXPECT_EQ(compile_error({{"enum", string_enum(4096)}}), "");
}

TEST(GrammarLimits, AnyOfWiderThanTheChoiceLimitIsRefused) {
  Json branches = Json::array();
  for (int i = 0; i < 5000; ++i) branches.push_back({{"const", i}});
  EXPECT_EQ(compile_error({{"anyOf", branches}}),
            "schema: a choice of 5000 alternatives exceeds the limit of 4096");
}

TEST(GrammarLimits, TooManyNodesIsRefusedAtTheSchemaThatPassedTheLimit) {
  // 20000 optional integer properties: several nodes each, over 65536 in all, made by the object that
  // holds them.
  Json properties = Json::object();
  for (int i = 0; i < 20000; ++i) properties[fmt::format("p{}", i)] = {{"type", "integer"}};
  const Json inner = {{"type", "object"}, {"properties", properties}};
  EXPECT_EQ(
      compile_error({{"type", "object"}, {"properties", {{"first", {{"type", "string"}}}, {"big", inner}}}}),
      "schema.properties.big: the grammar needs more than 65536 nodes");
}

TEST(GrammarLimits, LiteralTextOverTheByteLimitIsRefused) {
  EXPECT_EQ(compile_error({{"const", std::string(2 << 20, 'x')}}),
            "schema: the grammar's literal texts exceed 1048576 bytes");
  // Many enums together count as one grammar.
  Json properties = Json::object();
  for (int i = 0; i < 300; ++i) {
    Json values = Json::array();
    for (int k = 0; k < 4; ++k) values.push_back(std::string(1000, char('a' + k)) + std::to_string(i));
    properties[fmt::format("p{}", i)] = {{"enum", values}};
  }
  const std::string error = compile_error({{"type", "object"}, {"properties", properties}});
  EXPECT_TRUE(error.starts_with("schema.properties.p2")) << error;  // about 260 in
  EXPECT_TRUE(error.ends_with(": the grammar's literal texts exceed 1048576 bytes")) << error;
}

TEST(GrammarLimits, BuilderLimitsAreTheCallersToChoose) {
  GrammarBuilder b(GrammarLimits{.max_nodes = 3});
  const NodeId root = b.seq({b.bytes("a"), b.bytes("b"), b.bytes("c")});
  EXPECT_FALSE(b.limit_status().ok());
  auto g = b.build(root);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(), "the grammar needs more than 3 nodes");
}

TEST(GrammarLimits, HundredThousandDeepPatternIsRefusedWithoutRecursing) {
  const std::string deep = std::string(100000, '(') + "a" + std::string(100000, ')');
  EXPECT_EQ(compile_error({{"type", "string"}, {"pattern", deep}}),
            "schema.pattern: a pattern of 200001 characters exceeds the limit of 4096");
  // Within the length, the group depth is what recursion is bounded by.
  auto nested = [](int n) { return std::string(size_t(n), '(') + "a" + std::string(size_t(n), ')'); };
  EXPECT_EQ(compile_error({{"type", "string"}, {"pattern", nested(65)}}),
            "schema.pattern: groups nested deeper than 64 at 64");
  EXPECT_EQ(compile_error({{"type", "string"}, {"pattern", nested(64)}}), "");
  // Sibling groups do not add up.
  std::string siblings;
  for (int i = 0; i < 100; ++i) siblings += "(a)";
  EXPECT_EQ(compile_error({{"type", "string"}, {"pattern", siblings}}), "");
}

TEST(GrammarLimits, DeepSchemaIsRefused) {
  Json schema = {{"type", "string"}};
  for (int i = 0; i < 200; ++i) schema = {{"type", "array"}, {"items", schema}};
  EXPECT_TRUE(compile_error(schema).ends_with(": schemas nested deeper than 128 levels"))
      << compile_error(schema);
}

// $refs that share choices: a0 = anyOf[a1, a1], a1 = anyOf[a2, a2], ...: a few hundred bytes of schema
// whose start state the matcher used to enumerate 2^depth times over.
Json doubling_refs(int depth) {
  Json defs = Json::object();
  for (int i = 0; i < depth; ++i) {
    const Json ref = {{"$ref", fmt::format("#/$defs/a{}", i + 1)}};
    defs[fmt::format("a{}", i)] = {{"anyOf", {ref, ref}}};
  }
  defs[fmt::format("a{}", depth)] = {{"type", "integer"}};
  return {{"$defs", defs}, {"$ref", "#/$defs/a0"}};
}

TEST(GrammarLimits, ChoicesSharingChoicesAreRefusedAtBuild) {
  EXPECT_EQ(compile_error(doubling_refs(22)),
            "the grammar can start in more than 65536 ways (choices that share choices)");
  EXPECT_EQ(compile_error(doubling_refs(8)), "");
}

// The same doubling after each '[': the start is small, later states would double per level. A step past
// kMaxExpandWork refuses its symbol (quickly) instead of building the state.
TEST(GrammarLimits, MatcherStepsStayWithinTheExpandBudget) {
  GrammarBuilder b;
  const NodeId r = b.declare_rule();
  b.define_rule(r, b.alt({b.seq({b.bytes("["), r, b.bytes("]")}), b.seq({b.bytes("["), r, b.bytes("]")}),
                          b.bytes("x")}));
  auto g = b.build(r);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  Matcher m(*g);
  int levels = 0;
  const auto start = std::chrono::steady_clock::now();
  while (levels < 64 && m.advance('[')) ++levels;
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // 2^levels stacks (each a distinct path through the two Seq nodes); the budget stops it near 2^15.
  EXPECT_GE(levels, 10);
  EXPECT_LT(levels, 17);
  EXPECT_GE(m.state().size(), size_t(1) << 10);
  std::printf("doubling grammar: refused after %d levels (%zu stacks), %.1f ms\n", levels, m.state().size(),
              ms);
}

const Tokenizer& kimi() {
  static const Tokenizer t =
      std::move(Tokenizer::load(rill::testing::shared_path(rill::testing::kKimiTokenizerDir))).value();
  return t;
}

// A mask for the largest grammars within the limits, serial (one core: what a mask worker spends) and split
// over the pool. Printed for docs/PERF.md; the masks are checked against feeding tokens alone.
TEST(GrammarLimits, MaskCostAtTheLimits) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const TokenMasker tm(kimi());
  Json mixed = Json::array();  // 4096 values whose spellings share no prefix past the quote
  for (int i = 0; i < 4096; ++i) mixed.push_back(fmt::format("{:x}-{}", i * 2654435761u, i));
  Json wide = Json::array();  // 4096 alternatives of an anyOf, each a small object
  for (int i = 0; i < 4096; ++i)
    wide.push_back({{"type", "object"},
                    {"properties", {{fmt::format("k{}", i), {{"type", "integer"}}}}},
                    {"required", {fmt::format("k{}", i)}}});
  const std::vector<std::pair<const char*, Json>> cases = {
      {"enum of 4096 strings", {{"enum", string_enum(4096)}}},
      {"enum of 4096 mixed strings", {{"enum", mixed}}},
      {"anyOf of 4096 objects", {{"anyOf", wide}}}};
  for (const auto& [name, schema] : cases) {
    auto g = json_grammar(&schema);
    ASSERT_TRUE(g.ok()) << name << ": " << g.status().to_string();
    Matcher m(*g);
    for (const char* prefix : {"", "\"", "{\""}) {
      Matcher at = m;
      if (!at.advance_bytes(prefix)) continue;
      std::vector<uint32_t> serial(tm.mask_words()), parallel(tm.mask_words());
      auto t0 = std::chrono::steady_clock::now();
      tm.allowed(at, serial, /*parallel=*/false);
      auto t1 = std::chrono::steady_clock::now();
      tm.allowed(at, parallel);
      auto t2 = std::chrono::steady_clock::now();
      EXPECT_EQ(serial, parallel) << name << " after '" << prefix << "'";
      // Feeding each token alone (token_mask_test does all of them on smaller grammars; here a copy of the
      // matcher costs 4096 stacks): every 97th id.
      for (int32_t id = 0; id < tm.vocab_size(); id += 97) {
        Matcher c = at;
        EXPECT_EQ(test_bit(serial, id), tm.advance(c, id))
            << name << " after '" << prefix << "', token " << id;
      }
      std::printf("mask, %s after '%s' (%zu stacks): %.2f ms serial, %.2f ms on the pool\n", name, prefix,
                  at.state().size(), std::chrono::duration<double, std::milli>(t1 - t0).count(),
                  std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
  }
}

}  // namespace
}  // namespace rill::text::constraint
