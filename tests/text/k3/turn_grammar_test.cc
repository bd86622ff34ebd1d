// The K3 turn grammars ("required" tool calls, response_format) against turns written by hand from the XTML
// format (spec §2.5, serving.md): well-formed turns are accepted token by token as the real K3 vocabulary
// splits them, with every token inside the mask the engine would apply; turns that break the format or a
// tool's schema are not.
#include <gtest/gtest.h>

#include "text/constraint/grammar_constraint.h"
#include "text/k3/k3_tokenizer.h"
#include "text/k3/turn_grammar.h"

namespace rill::text::k3 {
namespace {

using constraint::GrammarConstraint;
using constraint::TokenMasker;

const std::shared_ptr<const TokenMasker>& masker() {
  static const auto m = std::make_shared<const TokenMasker>(k3_tokenizer());
  return m;
}

const Json kRequest = Json::parse(R"({
  "messages": [{"role": "user", "content": "hi"},
               {"role": "system", "content": "", "tools": [{"type": "function", "function": {"name": "get_time"}}]}],
  "tools": [{"type": "function", "function": {"name": "set_alarm", "parameters": {
    "type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}, "label": {"type": "string"}},
    "required": ["unit"]}}}]
})");

std::string call(const std::string& name, int index, const std::string& args) {
  return "<|open|>call tool=\"" + name + "\" index=\"" + std::to_string(index) +
         "\"<|sep|><|open|>json type=\"object\"<|sep|>" + args + "<|close|>json<|sep|><|close|>call<|sep|>";
}
std::string turn(const std::string& calls, const std::string& response = "") {
  return response + "<|close|>response<|sep|><|open|>tools<|sep|>" + calls +
         "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>";
}

// Feeds `text` (tokenized as the model would emit it) through the constraint: true when every token was in
// the mask and the grammar is finished at the end.
bool follows(const std::string& text, const ToolGrammarOptions& o, const Json& request = kRequest) {
  auto g = required_tool_call_grammar(request, k3_tokenizer(), o);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  GrammarConstraint c(*g, masker(), {});
  std::vector<uint32_t> mask(masker()->mask_words());
  for (int32_t id : k3_tokenizer().encode(text, /*allow_special=*/true)) {
    c.allowed_tokens(mask);
    if (!constraint::test_bit(mask, id)) return false;
    c.accept(id);
    if (c.broken()) return false;
  }
  return c.matcher().is_finished();
}

TEST(K3ToolGrammar, AcceptsWellFormedTurns) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  ToolGrammarOptions no_think{.thinking = false};
  EXPECT_TRUE(follows(turn(call("set_alarm", 1, R"({"unit":"celsius"})")), no_think));
  EXPECT_TRUE(follows(turn(call("set_alarm", 1, R"({"unit": "fahrenheit", "label": "wake up \"now\" ☀"})")),
                      no_think));
  EXPECT_TRUE(
      follows(turn(call("get_time", 1, "{}") + call("set_alarm", 2, R"({"unit":"celsius"})")), no_think));
  ToolGrammarOptions think{.thinking = true};
  EXPECT_TRUE(follows("The user wants a time.\n<|close|>think<|sep|><|open|>response<|sep|>" +
                          turn(call("get_time", 1, "{}")),
                      think));
}

TEST(K3ToolGrammar, RejectsWhatTheFormatOrSchemaForbids) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  ToolGrammarOptions o{.thinking = false};
  EXPECT_FALSE(follows(turn(call("set_timer", 1, "{}")), o));                    // undeclared tool
  EXPECT_FALSE(follows(turn(call("get_time", 2, "{}")), o));                     // index starts at 1
  EXPECT_FALSE(follows(turn(call("set_alarm", 1, R"({"label":"x"})")), o));      // required unit missing
  EXPECT_FALSE(follows(turn(call("set_alarm", 1, R"({"unit":"kelvin"})")), o));  // not in the enum
  EXPECT_FALSE(follows(turn(call("set_alarm", 1, R"({"unit":"celsius","x":1})")), o));  // no other keys
  EXPECT_FALSE(follows(turn(call("get_time", 1, "{}"), "Sure."), o));                   // no response text
  EXPECT_FALSE(
      follows("<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>", o));  // no call at all
  ToolGrammarOptions single{.thinking = false, .parallel_tool_calls = false};
  EXPECT_TRUE(follows(turn(call("get_time", 1, "{}")), single));
  EXPECT_FALSE(follows(turn(call("get_time", 1, "{}") + call("get_time", 2, "{}")), single));
  ToolGrammarOptions think{.thinking = true};
  EXPECT_FALSE(
      follows(turn(call("get_time", 1, "{}")), think));  // thinking on: the think channel closes first
}

// A named tool_choice: exactly one call, of that tool (a dynamic one too), parallel or not.
TEST(K3ToolGrammar, NamedToolIsExactlyOneCallOfIt) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const ToolGrammarOptions named{.thinking = false, .named_tool = "set_alarm"};
  EXPECT_TRUE(follows(turn(call("set_alarm", 1, R"({"unit":"celsius"})")), named));
  EXPECT_FALSE(follows(turn(call("get_time", 1, "{}")), named));
  EXPECT_FALSE(follows(
      turn(call("set_alarm", 1, R"({"unit":"celsius"})") + call("set_alarm", 2, R"({"unit":"celsius"})")),
      named));
  EXPECT_TRUE(follows(turn(call("get_time", 1, "{}")), {.thinking = false, .named_tool = "get_time"}));
  EXPECT_FALSE(required_tool_call_grammar(kRequest, k3_tokenizer(), {.named_tool = "nope"}).ok());
}

// response_format: the response channel is the JSON value, then the message ends.
bool response_follows(const std::string& text, const Json* schema, bool thinking) {
  auto g = response_format_grammar(schema, k3_tokenizer(), thinking);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  constraint::Matcher m(*g);
  for (int32_t id : k3_tokenizer().encode(text, /*allow_special=*/true))
    if (!masker()->advance(m, id)) return false;
  return m.is_finished();
}

TEST(K3ResponseFormatGrammar, TheResponseIsTheJsonValue) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const std::string end = "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>";
  const Json schema = kRequest["tools"][0]["function"]["parameters"];
  EXPECT_TRUE(response_follows(R"({"unit": "celsius", "label": "x"})" + end, &schema, false));
  EXPECT_TRUE(response_follows(
      std::string("hmm<|close|>think<|sep|><|open|>response<|sep|>") + R"({"unit":"celsius"})" + end, &schema,
      true));
  EXPECT_FALSE(response_follows(R"({"label": "x"})" + end, &schema, false));
  EXPECT_FALSE(response_follows(R"(Sure: {"unit": "celsius"})" + end, &schema, false));
  EXPECT_FALSE(response_follows(R"({"unit": "celsius"})", &schema, false));  // the message must end
  EXPECT_TRUE(response_follows(R"({"any": [1, {"thing": null}]})" + end, nullptr, false));  // json_object
  EXPECT_FALSE(response_follows(R"([1, 2])" + end, nullptr, false));
  const Json bad = Json::parse(R"({"type": "object", "properties": {"a": {"enum": []}}})");
  auto g = response_format_grammar(&bad, k3_tokenizer(), false);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("response_format.json_schema.schema.properties.a"), std::string::npos)
      << g.status().message();
}

TEST(K3ToolGrammar, ErrorsNameTheTool) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  Json bad = kRequest;
  bad["tools"][0]["function"]["parameters"] =
      Json::parse(R"({"type": "object", "properties": {"a": {"type": "str"}}})");
  auto g = required_tool_call_grammar(bad, k3_tokenizer(), {});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("set_alarm"), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("str"), std::string::npos) << g.status().message();
  Json none = Json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_FALSE(required_tool_call_grammar(none, k3_tokenizer(), {}).ok());
}

}  // namespace
}  // namespace rill::text::k3
