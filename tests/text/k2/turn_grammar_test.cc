// The K2-family turn grammar (tool_choice "required" / named) against turns written by hand from the K2
// tool-call format (serving.md §2.2-2.3): well-formed turns are accepted token by token as the real Kimi
// vocabulary splits them, each token inside the mask the engine would apply; turns that break the format, the
// tool choice or a tool's schema are not.
#include <gtest/gtest.h>

#include "shared_data.h"
#include "text/constraint/grammar_constraint.h"
#include "text/k2/turn_grammar.h"

namespace rill::text::k2 {
namespace {

using constraint::GrammarConstraint;
using constraint::TokenMasker;
using Json = nlohmann::ordered_json;

// The real Kimi vocabulary; a test calls RILL_REQUIRE_KIMI_TOKENIZER() first.
const Tokenizer& kimi() {
  static const Tokenizer* t = [] {
    auto loaded = Tokenizer::from_files(rill::testing::shared_path(rill::testing::kKimiTiktokenModel),
                                        rill::testing::shared_path(rill::testing::kKimiTokenizerConfig));
    EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
    return new Tokenizer(std::move(loaded).value());
  }();
  return *t;
}

const std::shared_ptr<const TokenMasker>& masker() {
  static const auto m = std::make_shared<const TokenMasker>(kimi());
  return m;
}

const Json kRequest = Json::parse(R"({
  "messages": [{"role": "user", "content": "hi"}],
  "tools": [{"type": "function", "function": {"name": "get_time"}},
            {"type": "function", "function": {"name": "set_alarm", "parameters": {
              "type": "object", "properties": {"hour": {"type": "integer", "minimum": 0, "maximum": 23},
                                               "label": {"type": "string", "pattern": "^[a-z]{1,8}$"}},
              "required": ["hour"], "additionalProperties": false}}}]
})");

std::string call(const std::string& name, int index, const std::string& args) {
  return "<|tool_call_begin|>functions." + name + ":" + std::to_string(index) +
         "<|tool_call_argument_begin|>" + args + "<|tool_call_end|>";
}
std::string section(const std::string& calls) {
  return "<|tool_calls_section_begin|>" + calls + "<|tool_calls_section_end|><|im_end|>";
}

// Feeds `text` (tokenized as the model would emit it) through the constraint: true when every token was in
// the mask and the grammar is finished at the end.
bool follows(const std::string& text, const ToolGrammarOptions& o, const Json& request = kRequest) {
  auto g = required_tool_call_grammar(request, kimi(), o);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  if (!g.ok()) return false;
  GrammarConstraint c(*g, masker(), {});
  std::vector<uint32_t> mask(masker()->mask_words());
  for (int32_t id : kimi().encode(text, /*allow_special=*/true)) {
    c.allowed_tokens(mask);
    if (!constraint::test_bit(mask, id)) return false;
    c.accept(id);
    if (c.broken()) return false;
  }
  return c.matcher().is_finished();
}

TEST(K2ToolGrammar, AcceptsWellFormedTurns) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const ToolGrammarOptions o;
  EXPECT_TRUE(follows(section(call("set_alarm", 0, R"({"hour":7})")), o));
  EXPECT_TRUE(follows(section(call("set_alarm", 0, R"({"hour": 23, "label": "wake"})")), o));
  EXPECT_TRUE(follows(section(call("get_time", 0, "{}") + call("set_alarm", 1, R"({"hour":0})")), o));
  EXPECT_TRUE(follows(section(call("get_time", 0, R"({"any": [1, {"thing": null}]})")), o));  // no parameters
  // Calls of earlier turns come first: the indices continue from there.
  EXPECT_TRUE(
      follows(section(call("get_time", 3, "{}") + call("get_time", 4, "{}")), {.first_call_index = 3}));
  // A reasoning channel the prompt opened: free text, then </think>, then the calls.
  EXPECT_TRUE(follows("The user wants the time.\n</think>" + section(call("get_time", 0, "{}")),
                      {.reasoning = true}));
}

TEST(K2ToolGrammar, RejectsWhatTheFormatToolChoiceOrSchemaForbids) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const ToolGrammarOptions o;
  EXPECT_FALSE(follows(section(call("set_timer", 0, "{}")), o));                // undeclared tool
  EXPECT_FALSE(follows(section(call("get_time", 1, "{}")), o));                 // the index starts at 0
  EXPECT_FALSE(follows(section(call("set_alarm", 0, R"({"label":"x"})")), o));  // required hour missing
  EXPECT_FALSE(follows(section(call("set_alarm", 0, R"({"hour":24})")), o));    // maximum 23
  EXPECT_FALSE(follows(section(call("set_alarm", 0, R"({"hour":7,"label":"Wake"})")), o));  // pattern
  EXPECT_FALSE(follows(section(call("set_alarm", 0, R"({"hour":7,"x":1})")), o));           // no other keys
  EXPECT_FALSE(follows("Sure. " + section(call("get_time", 0, "{}")), o));  // no content first
  EXPECT_FALSE(follows("<|tool_calls_section_begin|><|tool_calls_section_end|><|im_end|>", o));  // no call
  EXPECT_FALSE(follows(section(call("get_time", 0, "{}")).substr(0, 60), o));                    // unfinished
  EXPECT_FALSE(follows("Hello!<|im_end|>", o));
  EXPECT_FALSE(follows(section(call("get_time", 0, "{}")), {.reasoning = true}));  // </think> first
  // parallel_tool_calls false: one call.
  const ToolGrammarOptions single{.parallel_tool_calls = false};
  EXPECT_TRUE(follows(section(call("get_time", 0, "{}")), single));
  EXPECT_FALSE(follows(section(call("get_time", 0, "{}") + call("get_time", 1, "{}")), single));
}

// A named tool_choice: exactly one call, of that tool (vLLM's named semantics), parallel or not.
TEST(K2ToolGrammar, NamedToolIsExactlyOneCallOfIt) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const ToolGrammarOptions named{.named_tool = "set_alarm"};
  EXPECT_TRUE(follows(section(call("set_alarm", 0, R"({"hour":9})")), named));
  EXPECT_FALSE(follows(section(call("get_time", 0, "{}")), named));
  EXPECT_FALSE(
      follows(section(call("set_alarm", 0, R"({"hour":9})") + call("set_alarm", 1, R"({"hour":9})")), named));
  auto missing = required_tool_call_grammar(kRequest, kimi(), {.named_tool = "nope"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos) << missing.status().message();
}

TEST(K2ToolGrammar, ErrorsNameTheToolAndTheSchemaPath) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  Json bad = kRequest;
  bad["tools"][1]["function"]["parameters"]["properties"]["hour"]["multipleOf"] = 2;
  auto g = required_tool_call_grammar(bad, kimi(), {});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("tool set_alarm: parameters: schema.properties.hour.multipleOf"),
            std::string::npos)
      << g.status().message();
  EXPECT_FALSE(required_tool_call_grammar(Json::parse(R"({"messages": []})"), kimi(), {}).ok());
}

}  // namespace
}  // namespace rill::text::k2
