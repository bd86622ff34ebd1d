// K2 / Kimi-Linear output parser: a corpus of model outputs with hand-written expectations (from
// serving.md §2.2–§2.3), each also parsed under every 2-way split and 200+ random chunkings.
#include <gtest/gtest.h>

#include "text/parsers/output_parser.h"
#include "text/parsers/parser_harness.h"

namespace rill::text {
namespace {

using testing::Case;
using testing::Expected;
using E = ParseErrorKind;

const std::string kBegin = "<|tool_calls_section_begin|>";
const std::string kEnd = "<|tool_calls_section_end|>";
const std::string kImEnd = "<|im_end|>";

std::string call(const std::string& id, const std::string& arguments) {
  return "<|tool_call_begin|>" + id + "<|tool_call_argument_begin|>" + arguments + "<|tool_call_end|>";
}

ParserConfig k2() {
  return {.family = ModelFamily::KimiK2};
}
ParserConfig k2_instruct() {
  return {.family = ModelFamily::KimiK2, .k2_reasoning = false};
}
ParserConfig k2_prompt_in_think() {
  return {.family = ModelFamily::KimiK2, .starts_in_reasoning = true};
}

std::vector<Case> well_formed_cases() {
  return {
      {"plain_answer", k2(), "Hello, world!" + kImEnd, {.content = "Hello, world!", .stop_seen = true}},
      {"reasoning_then_answer",
       k2(),
       "<think>2+2 is basic arithmetic.</think>The answer is 4." + kImEnd,
       {.reasoning = "2+2 is basic arithmetic.",
        .content = "The answer is 4.",
        .reasoning_ended = true,
        .stop_seen = true}},
      {"prompt_opened_think",
       k2_prompt_in_think(),
       "Thinking it over.</think>Done." + kImEnd,
       {.reasoning = "Thinking it over.", .content = "Done.", .reasoning_ended = true, .stop_seen = true}},
      {"prompt_opened_think_model_repeats_tag",
       k2_prompt_in_think(),
       "<think>Still.</think>Ok",
       {.reasoning = "Still.", .content = "Ok", .reasoning_ended = true}},
      {"instruct_has_no_reasoning_channel",
       k2_instruct(),
       "<think>not a channel</think> plain" + kImEnd,
       {.content = "<think>not a channel</think> plain", .stop_seen = true}},
      {"one_tool_call",
       k2(),
       kBegin + call("functions.get_weather:0", R"({"city": "Beijing"})") + kEnd + kImEnd,
       {.tool_calls = {{"functions.get_weather:0", "get_weather", R"({"city": "Beijing"})"}},
        .stop_seen = true}},
      {"reasoning_content_two_calls",
       k2(),
       "<think>Need weather and time.</think>Checking both." + kBegin +
           call("functions.get_weather:0", R"({"city":"Paris"})") +
           call("functions.get_time:1", R"({"tz":"CET"})") + kEnd + kImEnd,
       {.reasoning = "Need weather and time.",
        .content = "Checking both.",
        .tool_calls = {{"functions.get_weather:0", "get_weather", R"({"city":"Paris"})"},
                       {"functions.get_time:1", "get_time", R"({"tz":"CET"})"}},
        .reasoning_ended = true,
        .stop_seen = true}},
      // The model's text, streamed and whole: big integers and number spellings are not re-serialised.
      {"numbers_verbatim",
       k2(),
       kBegin +
           call("functions.pay:0", R"({"z": 63200810010550512345678901234, "amount": 1.50, "big": 1e3})") +
           kEnd + kImEnd,
       {.tool_calls = {{"functions.pay:0", "pay",
                        R"({"z": 63200810010550512345678901234, "amount": 1.50, "big": 1e3})"}},
        .stop_seen = true}},
      {"whitespace_between_markers",
       k2(),
       kBegin +
           "\n <|tool_call_begin|> functions.search:0 \n<|tool_call_argument_begin|> {\"q\": \"a  b\"} \n" +
           "<|tool_call_end|>\n" + kEnd + kImEnd,
       {.tool_calls = {{"functions.search:0", "search", R"({"q": "a  b"})"}}, .stop_seen = true}},
      {"name_index_ids",
       {.family = ModelFamily::KimiK2,
        .tool_call_ids = ToolCallIdStyle::NameIndex,
        .first_tool_call_number = 3},
       kBegin + call("functions.get_weather:0", "{}") + call("functions.get_time:1", R"({"a":[]})") + kEnd,
       {.tool_calls = {{"get_weather_3", "get_weather", "{}"}, {"get_time_4", "get_time", R"({"a":[]})"}}}},
      {"unicode",
       k2(),
       "<think>想一想🤔</think>答案：北京 🌏" + kBegin +
           call("functions.查询:0", R"({"城市": "北京", "emoji": "🎉"})") + kEnd + kImEnd,
       {.reasoning = "想一想🤔",
        .content = "答案：北京 🌏",
        .tool_calls = {{"functions.查询:0", "查询", R"({"城市": "北京", "emoji": "🎉"})"}},
        .reasoning_ended = true,
        .stop_seen = true}},
      {"dotted_hyphen_name_without_prefix",
       k2(),
       kBegin + call("my-tool.v2:7", "{}") + kEnd,
       {.tool_calls = {{"my-tool.v2:7", "my-tool.v2", "{}"}}}},
      {"section_ends_reasoning",
       k2(),
       "<think>plan: call f" + kBegin + call("functions.f:0", "{}") + kEnd,
       {.reasoning = "plan: call f", .tool_calls = {{"functions.f:0", "f", "{}"}}, .reasoning_ended = true}},
      {"content_after_section",
       k2(),
       "A" + kBegin + call("functions.f:0", "{}") + kEnd + "B" + kImEnd,
       {.content = "AB", .tool_calls = {{"functions.f:0", "f", "{}"}}, .stop_seen = true}},
      {"marker_spellings_inside_arguments",
       k2(),
       kBegin + call("functions.echo:0", R"({"s": "<think>a[b]</think> <|x|>"})") + kEnd,
       {.tool_calls = {{"functions.echo:0", "echo", R"({"s": "<think>a[b]</think> <|x|>"})"}}}},
      {"eot_stop", k2(), "Done[EOT]", {.content = "Done", .stop_seen = true}},
      {"stop_while_reasoning", k2(), "<think>hmm" + kImEnd, {.reasoning = "hmm", .stop_seen = true}},
      {"empty_output", k2(), "", {}},
  };
}

std::vector<Case> malformed_cases() {
  return {
      {"unterminated_think", k2(), "<think>still thinking", {.reasoning = "still thinking"}},
      {"section_without_end",
       k2(),
       "Sure." + kBegin + call("functions.f:0", "{}"),
       {.content = "Sure.",
        .tool_calls = {{"functions.f:0", "f", "{}"}},
        .errors = {{E::UnterminatedToolSection, -1}}}},
      {"stop_inside_section",
       k2(),
       kBegin + call("functions.f:0", "{}") + kImEnd,
       {.tool_calls = {{"functions.f:0", "f", "{}"}},
        .errors = {{E::UnterminatedToolSection, -1}},
        .stop_seen = true}},
      {"bad_json_arguments",
       k2(),
       kBegin + call("functions.f:0", R"({"a": })") + kEnd,
       {.tool_calls = {{"functions.f:0", "f", R"({"a": })"}}, .errors = {{E::InvalidArguments, 0}}}},
      {"array_arguments",
       k2(),
       kBegin + call("functions.f:0", "[1, 2]") + kEnd,
       {.tool_calls = {{"functions.f:0", "f", "[1, 2]"}}, .errors = {{E::InvalidArguments, 0}}}},
      {"bad_call_id",
       k2(),
       kBegin + call("functions.bad name:0", "{}") + kEnd,
       {.content = call("functions.bad name:0", "{}"), .errors = {{E::MalformedToolCall, -1}}}},
      {"missing_argument_begin",
       k2(),
       kBegin + "<|tool_call_begin|>functions.f:0{}<|tool_call_end|>" + kEnd,
       {.content = "<|tool_call_begin|>functions.f:0{}<|tool_call_end|>",
        .errors = {{E::MalformedToolCall, -1}}}},
      {"garbage_between_calls",
       k2(),
       kBegin + "oops" + call("functions.f:0", "{}") + " \n" + kEnd,
       {.content = "oops",
        .tool_calls = {{"functions.f:0", "f", "{}"}},
        .errors = {{E::UnexpectedText, -1}}}},
      {"misplaced_markers_in_content",
       k2(),
       "a<|tool_call_end|>b</think>c<|im_middle|>d",
       {.content = "a<|tool_call_end|>b</think>c<|im_middle|>d",
        .errors = {{E::UnexpectedMarker, -1}, {E::UnexpectedMarker, -1}}}},
      // A marker cut off by the end of the text is dropped (issue #34: no markup in content).
      {"truncated_mid_marker", k2(), "The answer<|tool_calls_sec", {.content = "The answer"}},
      {"truncated_think_close", k2(), "<think>abc</thi", {.reasoning = "abc"}},
      {"truncated_in_arguments",
       k2(),
       kBegin + "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\": 1",
       {.tool_calls = {{"functions.f:0", "f", R"({"a": 1)"}}, .errors = {{E::TruncatedToolCall, 0}}}},
      {"truncated_in_call_id",
       k2(),
       kBegin + "<|tool_call_begin|>functions.f",
       {.errors = {{E::TruncatedToolCall, -1}}}},  // dropped: no markup in content (issue #34)
      {"call_cut_by_next_call",
       k2(),
       kBegin + "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\":1" +
           call("functions.g:1", "{}") + kEnd,
       {.tool_calls = {{"functions.f:0", "f", R"({"a":1)"}, {"functions.g:1", "g", "{}"}},
        .errors = {{E::TruncatedToolCall, 0}}}},
      {"eos_then_trailing_text",
       k2(),
       "Hi[EOS]junk",
       {.content = "Hi", .errors = {{E::TextAfterStop, -1}}, .stop_seen = true}},
      // ignore_eos: the end of the message ends nothing; it and what follows are content as written.
      {"ignore_eos_keeps_text_after_the_end",
       {.family = ModelFamily::KimiK2, .stop_at_end_of_message = false},
       "Hi" + kImEnd + "<|im_user|>more" + kBegin + "x[EOS]",
       {.content = "Hi" + kImEnd + "<|im_user|>more" + kBegin + "x[EOS]", .stop_seen = true}},
      {"ignore_eos_ends_reasoning_into_content",
       {.family = ModelFamily::KimiK2, .starts_in_reasoning = true, .stop_at_end_of_message = false},
       "hmm[EOT]</think>after",
       {.reasoning = "hmm", .content = "[EOT]</think>after", .stop_seen = true}},
  };
}

class KimiK2Corpus : public ::testing::TestWithParam<Case> {};

TEST_P(KimiK2Corpus, WholeTextMatchesHandWrittenResult) {
  testing::Run run = testing::run_chunked(GetParam().config, GetParam().text, {});
  testing::expect_matches(run.result, GetParam().expected);
}

TEST_P(KimiK2Corpus, EveryChunkingGivesTheWholeTextResult) {
  uint64_t seed = testing::test_seed() ^ std::hash<std::string>{}(GetParam().name);
  testing::check_all_chunkings(GetParam().config, GetParam().text, 200, seed);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}
INSTANTIATE_TEST_SUITE_P(WellFormed, KimiK2Corpus, ::testing::ValuesIn(well_formed_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Malformed, KimiK2Corpus, ::testing::ValuesIn(malformed_cases()), case_name);

std::unique_ptr<OutputParser> parser(const ParserConfig& config) {
  auto made = make_output_parser(config);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  return std::move(made).value();
}

std::string texts(const std::vector<OutputDelta>& deltas) {
  std::string out;
  for (const OutputDelta& d : deltas) out += d.text;
  return out;
}

TEST(KimiK2Parser, StreamsArgumentsBeforeTheCallEnds) {
  auto p = parser(k2());
  std::string head =
      kBegin + "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Bei";
  std::vector<OutputDelta> deltas;
  for (char c : head) {
    for (OutputDelta& d : p->feed(std::string_view(&c, 1))) deltas.push_back(std::move(d));
  }
  ASSERT_GE(deltas.size(), 2u);
  EXPECT_EQ(deltas[0].tool_id, "functions.get_weather:0");
  EXPECT_EQ(deltas[0].tool_name, "get_weather");
  EXPECT_EQ(deltas[0].text, "");
  EXPECT_EQ(texts(deltas), "{\"city\": \"Bei");  // everything so far, nothing held back
  EXPECT_EQ(p->result().tool_calls.at(0).arguments, "{\"city\": \"Bei");
}

TEST(KimiK2Parser, HoldsBackOnlyWhatCouldBeAMarker) {
  auto p = parser(k2());
  EXPECT_EQ(texts(p->feed("Hello <|im_e")), "Hello ");
  EXPECT_EQ(texts(p->feed("nd|>")), "");
  EXPECT_TRUE(p->result().stop_seen);
  EXPECT_EQ(p->result().content, "Hello ");

  auto q = parser(k2());
  EXPECT_EQ(texts(q->feed("x <|im_e")), "x ");
  EXPECT_EQ(texts(q->feed("ndless")), "<|im_endless");  // disambiguated: not a marker after all
}

TEST(KimiK2Parser, HoldsBackArgumentWhitespaceUntilMoreJsonFollows) {
  auto p = parser(k2());
  p->feed(kBegin + "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>  {\"a\":");
  EXPECT_EQ(p->result().tool_calls.at(0).arguments, "{\"a\":");
  EXPECT_EQ(texts(p->feed(" \n")), "");
  EXPECT_EQ(texts(p->feed("1} ")), " \n1}");
  p->feed("\n<|tool_call_end|>");
  EXPECT_EQ(p->result().tool_calls.at(0).arguments, "{\"a\": \n1}");
}

TEST(KimiK2Parser, NeverSplitsAUtf8Character) {
  auto p = parser(k2());
  std::string bei = "北";  // 3 bytes
  EXPECT_TRUE(p->feed(bei.substr(0, 2)).empty());
  std::vector<OutputDelta> deltas = p->feed(bei.substr(2));
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(deltas[0].text, "北");
}

TEST(KimiK2Parser, FeedAfterFinishIsIgnored) {
  auto p = parser(k2());
  p->feed("a");
  p->finish();
  EXPECT_TRUE(p->feed("b").empty());
  EXPECT_TRUE(p->finish().empty());
  EXPECT_EQ(p->result().content, "a");
}

TEST(ParserConfig, RejectsContradictions) {
  EXPECT_FALSE(
      make_output_parser({.family = ModelFamily::KimiK2, .k2_reasoning = false, .starts_in_reasoning = true})
          .ok());
  EXPECT_FALSE(make_output_parser({.family = ModelFamily::KimiK3, .first_tool_call_number = -1}).ok());
  EXPECT_TRUE(make_output_parser({.family = ModelFamily::KimiK3, .starts_in_reasoning = true}).ok());
}

}  // namespace
}  // namespace rill::text
