// K3 XTML output parser: a corpus of model outputs with hand-written expectations (from
// kimi-architecture.md §6.4 and serving.md §2.5), each also parsed under every 2-way split and 200+
// random chunkings.
#include <gtest/gtest.h>

#include "text/parsers/output_parser.h"
#include "text/parsers/parser_harness.h"

namespace rill::text {
namespace {

using testing::Case;
using E = ParseErrorKind;

const std::string kThinkEnd = "<|close|>think<|sep|>";
const std::string kResponse = "<|open|>response<|sep|>";
const std::string kResponseEnd = "<|close|>response<|sep|>";
const std::string kTools = "<|open|>tools<|sep|>";
const std::string kToolsEnd = "<|close|>tools<|sep|>";
const std::string kMessageEnd = "<|close|>message<|sep|><|end_of_msg|>";

std::string arg(const std::string& key, const std::string& type, const std::string& value) {
  return "<|open|>argument key=\"" + key + "\" type=\"" + type + "\"<|sep|>" + value +
         "<|close|>argument<|sep|>";
}
std::string call(const std::string& name, int index, const std::string& body) {
  return "<|open|>call tool=\"" + name + "\" index=\"" + std::to_string(index) + "\"<|sep|>" + body +
         "<|close|>call<|sep|>";
}
std::string json_block(const std::string& body) {
  return "<|open|>json type=\"object\"<|sep|>" + body + "<|close|>json<|sep|>";
}

ParserConfig thinking() {
  return {.family = ModelFamily::KimiK3, .starts_in_reasoning = true};
}
ParserConfig no_thinking() {
  return {.family = ModelFamily::KimiK3};
}

std::vector<Case> well_formed_cases() {
  return {
      {"reasoning_then_response",
       thinking(),
       "Let me think." + kThinkEnd + kResponse + "The answer is 4." + kResponseEnd + kMessageEnd,
       {.reasoning = "Let me think.",
        .content = "The answer is 4.",
        .reasoning_ended = true,
        .stop_seen = true}},
      {"thinking_off",
       no_thinking(),
       "Hello!" + kResponseEnd + kMessageEnd,
       {.content = "Hello!", .stop_seen = true}},
      {"typed_arguments",
       thinking(),
       "Need a search." + kThinkEnd + kResponse + "Searching." + kResponseEnd + kTools +
           call("search", 1,
                arg("q", "string", "rust \"async\" & <tokio>") + arg("limit", "number", "10") +
                    arg("ratio", "number", "0.25") + arg("exact", "boolean", "false") +
                    arg("cursor", "null", "null") +
                    arg("filters", "object", R"({"lang": "en", "tags": ["a", "b"]})") +
                    arg("fields", "array", R"(["title", 2, true])")) +
           kToolsEnd + kMessageEnd,
       {.reasoning = "Need a search.",
        .content = "Searching.",
        .tool_calls =
            {{"search_0", "search",
              R"({"q":"rust \"async\" & <tokio>","limit":10,"ratio":0.25,"exact":false,"cursor":null,)"
              R"("filters":{"lang": "en", "tags": ["a", "b"]},"fields":["title", 2, true]})"}},
        .reasoning_ended = true,
        .stop_seen = true}},
      {"json_block",
       no_thinking(),
       kResponseEnd + kTools + call("create", 1, json_block(R"({"title": "T", "n": [1, 2]})")) + kToolsEnd +
           kMessageEnd,
       {.tool_calls = {{"create_0", "create", R"({"title": "T", "n": [1, 2]})"}}, .stop_seen = true}},
      // Arguments are the model's text: a 29-digit integer, 1.50, 1e3 and -0.0 keep their spelling (through
      // a double they would read 6.32008100105505e+28, 1.5, 1000.0, -0.0), and keys keep their order.
      {"json_block_numbers_verbatim",
       no_thinking(),
       kResponseEnd + kTools +
           call("pay", 1,
                json_block(
                    R"( {"z": 63200810010550512345678901234, "amount": 1.50, "big": 1e3, "neg": -0.0} )")) +
           kToolsEnd + kMessageEnd,
       {.tool_calls = {{"pay_0", "pay",
                        R"({"z": 63200810010550512345678901234, "amount": 1.50, "big": 1e3, "neg": -0.0})"}},
        .stop_seen = true}},
      {"typed_numbers_verbatim",
       no_thinking(),
       kResponseEnd + kTools +
           call("pay", 1,
                arg("z", "number", "63200810010550512345678901234") + arg("amount", "number", " 1.50 ") +
                    arg("nested", "object", R"({"n": 1E+3})") +
                    arg("list", "array", "[18446744073709551617]")) +
           kToolsEnd + kMessageEnd,
       {.tool_calls = {{"pay_0", "pay",
                        R"({"z":63200810010550512345678901234,"amount":1.50,"nested":{"n": 1E+3},)"
                        R"("list":[18446744073709551617]})"}},
        .stop_seen = true}},
      {"two_calls_kimi_k2_ids",
       {.family = ModelFamily::KimiK3, .tool_call_ids = ToolCallIdStyle::KimiK2, .first_tool_call_number = 2},
       "ok" + kResponseEnd + kTools + call("a", 1, arg("x", "number", "1")) + call("b", 2, "") + kToolsEnd +
           kMessageEnd,
       {.content = "ok",
        .tool_calls = {{"functions.a:2", "a", R"({"x":1})"}, {"functions.b:3", "b", "{}"}},
        .stop_seen = true}},
      {"unicode",
       thinking(),
       "思考中🤔" + kThinkEnd + kResponse + "北京今天晴 ☀️" + kResponseEnd + kTools +
           call("查询天气", 1, arg("城市", "string", "北京🏙")) + kToolsEnd + kMessageEnd,
       {.reasoning = "思考中🤔",
        .content = "北京今天晴 ☀️",
        .tool_calls = {{"查询天气_0", "查询天气", R"({"城市":"北京🏙"})"}},
        .reasoning_ended = true,
        .stop_seen = true}},
      {"escaped_attributes",
       no_thinking(),
       kResponseEnd + kTools + call("lookup", 1, arg("say &quot;hi&quot; &amp; bye", "string", "x")) +
           kToolsEnd,
       {.tool_calls = {{"lookup_0", "lookup", R"({"say \"hi\" & bye":"x"})"}}}},
      {"string_value_keeps_whitespace_and_tag_text",
       no_thinking(),
       kResponseEnd + kTools + call("run", 1, arg("code", "string", "  line1\n<|open|>x<|sep|>  ")) +
           kToolsEnd,
       {.tool_calls = {{"run_0", "run", R"({"code":"  line1\n<|open|>x<|sep|>  "})"}}}},
      {"end_of_msg_without_message_close",
       thinking(),
       "a" + kThinkEnd + kResponse + "b" + kResponseEnd + "<|end_of_msg|>",
       {.reasoning = "a", .content = "b", .reasoning_ended = true, .stop_seen = true}},
      {"tools_without_response_channel",
       thinking(),
       "r" + kThinkEnd + kTools + call("f", 1, "") + kToolsEnd + kMessageEnd,
       {.reasoning = "r", .tool_calls = {{"f_0", "f", "{}"}}, .reasoning_ended = true, .stop_seen = true}},
      {"eos_stop", no_thinking(), "hi[EOS]", {.content = "hi", .stop_seen = true}},
      {"empty_output", thinking(), "", {}},
  };
}

std::vector<Case> malformed_cases() {
  return {
      {"unterminated_think", thinking(), "still thinking", {.reasoning = "still thinking"}},
      {"missing_think_close",
       thinking(),
       "plan" + kResponse + "answer" + kResponseEnd + kMessageEnd,
       {.reasoning = "plan",
        .content = "answer",
        .errors = {{E::UnexpectedMarker, -1}},
        .reasoning_ended = true,
        .stop_seen = true}},
      {"missing_sep_after_think_close",
       thinking(),
       "reason<|close|>think The answer",
       {.reasoning = "reason<|close|>think The answer", .errors = {{E::UnexpectedMarker, -1}}}},
      {"stray_sep_in_think",
       thinking(),
       "a<|sep|>b" + kThinkEnd,
       {.reasoning = "a<|sep|>b", .errors = {{E::UnexpectedMarker, -1}}, .reasoning_ended = true}},
      {"tools_without_close",
       no_thinking(),
       "x" + kResponseEnd + kTools + call("f", 1, "") + kMessageEnd,
       {.content = "x",
        .tool_calls = {{"f_0", "f", "{}"}},
        .errors = {{E::UnterminatedToolSection, -1}},
        .stop_seen = true}},
      {"bad_number_argument",
       no_thinking(),
       kResponseEnd + kTools + call("f", 1, arg("n", "number", "ten")) + kToolsEnd,
       {.tool_calls = {{"f_0", "f", R"({"n":"ten"})"}}, .errors = {{E::InvalidArguments, 0}}}},
      {"type_mismatch",
       no_thinking(),
       kResponseEnd + kTools + call("f", 1, arg("n", "number", "\"3\"")) + kToolsEnd,
       {.tool_calls = {{"f_0", "f", R"({"n":"3"})"}}, .errors = {{E::InvalidArguments, 0}}}},
      {"unknown_argument_type",
       no_thinking(),
       kResponseEnd + kTools + call("f", 1, arg("k", "integer", "5")) + kToolsEnd,
       {.tool_calls = {{"f_0", "f", R"({"k":5})"}}, .errors = {{E::InvalidArguments, 0}}}},
      {"duplicate_argument",
       no_thinking(),
       kResponseEnd + kTools + call("f", 1, arg("a", "number", "1") + arg("a", "number", "2")) + kToolsEnd,
       {.tool_calls = {{"f_0", "f", R"({"a":2})"}}, .errors = {{E::InvalidArguments, 0}}}},
      {"duplicate_argument_keeps_first_place",
       no_thinking(),
       kResponseEnd + kTools +
           call("f", 1, arg("a", "number", "1") + arg("b", "string", "x") + arg("a", "number", "2.50")) +
           kToolsEnd,
       {.tool_calls = {{"f_0", "f", R"({"a":2.50,"b":"x"})"}}, .errors = {{E::InvalidArguments, 0}}}},
      {"bad_json_block",
       no_thinking(),
       kResponseEnd + kTools + call("f", 1, json_block(R"( {"a": } )")) + kToolsEnd,
       {.tool_calls = {{"f_0", "f", R"({"a": })"}}, .errors = {{E::InvalidArguments, 0}}}},
      {"missing_sep_in_call_header",
       no_thinking(),
       "ok" + kResponseEnd + kTools + "<|open|>call tool=\"f\" index=\"1\"" + arg("a", "string", "x") +
           "<|close|>call<|sep|>" + kToolsEnd + kMessageEnd,
       {.content = "ok<|open|>call tool=\"f\" index=\"1\"" + arg("a", "string", "x") + "<|close|>call<|sep|>",
        .errors = {{E::MalformedToolCall, -1}},
        .stop_seen = true}},
      {"bad_attribute_syntax",
       no_thinking(),
       kResponseEnd + kTools + "<|open|>call tool=f<|sep|><|close|>call<|sep|>" + kToolsEnd,
       {.content = "<|open|>call tool=f<|sep|><|close|>call<|sep|>", .errors = {{E::MalformedToolCall, -1}}}},
      {"call_missing_argument_close",
       no_thinking(),
       kResponseEnd + kTools +
           "<|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>argument key=\"a\" type=\"string\"<|sep|>x" +
           "<|close|>call<|sep|>" + call("g", 2, "") + kToolsEnd,
       {.content =
            "<|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>argument key=\"a\" type=\"string\"<|sep|>x"
            "<|close|>call<|sep|>",
        .tool_calls = {{"g_0", "g", "{}"}},
        .errors = {{E::MalformedToolCall, -1}}}},
      {"garbage_between_channels",
       thinking(),
       "r" + kThinkEnd + "oops" + kResponse + "c" + kResponseEnd + kMessageEnd,
       {.reasoning = "r",
        .content = "oopsc",
        .errors = {{E::UnexpectedText, -1}},
        .reasoning_ended = true,
        .stop_seen = true}},
      {"garbage_between_calls",
       no_thinking(),
       kResponseEnd + kTools + "??" + call("f", 1, "") + kToolsEnd,
       {.content = "??", .tool_calls = {{"f_0", "f", "{}"}}, .errors = {{E::UnexpectedText, -1}}}},
      {"unknown_tag_in_response",
       no_thinking(),
       "a<|open|>foo<|sep|>b" + kResponseEnd + kMessageEnd,
       {.content = "a<|open|>foo<|sep|>b",
        .errors = {{E::UnexpectedMarker, -1}, {E::UnexpectedMarker, -1}},
        .stop_seen = true}},
      {"late_think_is_stray_text",
       no_thinking(),
       "answer" + kResponseEnd + "<|open|>think<|sep|>more" + kThinkEnd + kMessageEnd,
       {.content = "answer<|open|>think<|sep|>more" + kThinkEnd,
        .errors = {{E::UnexpectedText, -1}},
        .stop_seen = true}},
      {"truncated_mid_marker", no_thinking(), "answer<|clo", {.content = "answer"}},  // cut marker dropped
      {"truncated_after_lone_marker",
       no_thinking(),
       "answer<|close|>resp",
       {.content = "answer"}},  // the cut marker is dropped (issue #34)
      {"truncated_inside_call",
       no_thinking(),
       "x" + kResponseEnd + kTools + "<|open|>call tool=\"f\" index=\"1\"<|sep|>" +
           "<|open|>argument key=\"a\" type=\"string\"<|sep|>hal",
       {.content = "x", .errors = {{E::TruncatedToolCall, -1}}}},  // the cut call dropped (issue #34)
      {"call_cut_by_message_end",
       no_thinking(),
       kResponseEnd + kTools + "<|open|>call tool=\"f\" index=\"1\"<|sep|>" + kMessageEnd,
       {.errors = {{E::TruncatedToolCall, -1}, {E::UnterminatedToolSection, -1}},
        .stop_seen = true}},
      {"text_after_message",
       no_thinking(),
       "a" + kResponseEnd + kMessageEnd + "junk",
       {.content = "a", .errors = {{E::TextAfterStop, -1}}, .stop_seen = true}},
      // ignore_eos: the end of the message ends nothing; it and what follows are content as written.
      {"ignore_eos_keeps_text_after_the_message",
       {.family = ModelFamily::KimiK3, .stop_at_end_of_message = false},
       "a" + kResponseEnd + kMessageEnd + "<|open|>message role=\"user\"<|sep|>junk",
       {.content = "a" + kMessageEnd + "<|open|>message role=\"user\"<|sep|>junk", .stop_seen = true}},
      {"ignore_eos_in_the_think_channel",
       {.family = ModelFamily::KimiK3, .starts_in_reasoning = true, .stop_at_end_of_message = false},
       "hmm<|end_of_msg|>" + kResponse + "x",
       {.reasoning = "hmm", .content = "<|end_of_msg|>" + kResponse + "x", .stop_seen = true}},
  };
}

class KimiK3Corpus : public ::testing::TestWithParam<Case> {};

TEST_P(KimiK3Corpus, WholeTextMatchesHandWrittenResult) {
  testing::Run run = testing::run_chunked(GetParam().config, GetParam().text, {});
  testing::expect_matches(run.result, GetParam().expected);
}

TEST_P(KimiK3Corpus, EveryChunkingGivesTheWholeTextResult) {
  uint64_t seed = testing::test_seed() ^ std::hash<std::string>{}(GetParam().name);
  testing::check_all_chunkings(GetParam().config, GetParam().text, 200, seed);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}
INSTANTIATE_TEST_SUITE_P(WellFormed, KimiK3Corpus, ::testing::ValuesIn(well_formed_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Malformed, KimiK3Corpus, ::testing::ValuesIn(malformed_cases()), case_name);

TEST(KimiK3Parser, EmitsReasoningEndBoundaryBeforeContent) {
  auto made = make_output_parser(thinking());
  ASSERT_TRUE(made.ok());
  auto& p = *made;
  std::vector<OutputDelta> deltas = p->feed("r" + kThinkEnd + kResponse + "c");
  ASSERT_EQ(deltas.size(), 3u);
  EXPECT_EQ(deltas[0].kind, DeltaKind::Reasoning);
  EXPECT_EQ(deltas[1].kind, DeltaKind::ReasoningEnd);
  EXPECT_EQ(deltas[1].text, "");
  EXPECT_EQ(deltas[2].kind, DeltaKind::Content);
}

TEST(KimiK3Parser, EmitsACallOnlyOnceItIsClosed) {
  auto made = make_output_parser(no_thinking());
  ASSERT_TRUE(made.ok());
  auto& p = *made;
  EXPECT_TRUE(
      p->feed(kResponseEnd + kTools + "<|open|>call tool=\"f\" index=\"1\"<|sep|>" + arg("a", "number", "1"))
          .empty());
  std::vector<OutputDelta> deltas = p->feed("<|close|>call<|sep|>");
  ASSERT_EQ(deltas.size(), 2u);  // header with arguments "", then the whole arguments
  EXPECT_EQ(deltas[0].tool_id, "f_0");
  EXPECT_EQ(deltas[0].text, "");
  EXPECT_EQ(deltas[1].tool_id, "");
  EXPECT_EQ(deltas[1].text, R"({"a":1})");
}

// tool_choice "none": a call written anyway is content, as written, and no tool call.
TEST(KimiK3Parser, ToolChoiceNoneKeepsCallsAsContent) {
  ParserConfig config = no_thinking();
  config.tool_calls = false;
  auto made = make_output_parser(config);
  ASSERT_TRUE(made.ok());
  auto& p = *made;
  const std::string call =
      "<|open|>call tool=\"f\" index=\"1\"<|sep|>" + arg("a", "number", "1") + "<|close|>call<|sep|>";
  p->feed("ok" + kResponseEnd + kTools + call + "<|close|>tools<|sep|>" + kMessageEnd);
  p->finish();
  EXPECT_TRUE(p->result().tool_calls.empty());
  EXPECT_EQ(p->result().content, "ok" + call);
}

}  // namespace
}  // namespace rill::text
