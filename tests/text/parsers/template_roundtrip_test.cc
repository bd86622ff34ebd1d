// The parsers read back what the real chat templates write for an assistant turn: the model is
// trained on those renderings, so they are what it emits.
//
// The literals below were derived by rendering the request JSONs below with
//   python3 tests/text/jinja/render_reference.py ../shared/chat_templates/TEMPLATE < request.json
// (moonshotai-Kimi-K2-Thinking.jinja; Kimi-K3.jinja with thinking true and false) and keeping what
// follows the generation prompt. RendersAsCommitted re-renders them when python3 + jinja2 and the shared
// templates exist.
// moonshotai-Kimi-K2.jinja (K2-Instruct) drops tool_calls from assistant turns altogether (it renders
// content only), so the K2 tool-call format is taken from the K2-Thinking template, which writes it.
// Expected values come from the request JSON, not from the parser.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "shared_data.h"
#include "test_paths.h"
#include "text/parsers/output_parser.h"
#include "text/parsers/parser_harness.h"

namespace rill::text {
namespace {

using Json = nlohmann::ordered_json;

const char* kK2Request =
    R"json({"messages":[{"role":"user","content":"Weather in Beijing, and the time there?"},{"role":"assistant","reasoning_content":"Need both tools.","content":"Let me check.","tool_calls":[{"id":"functions.get_weather:0","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"北京\"}"}},{"id":"functions.get_time:1","type":"function","function":{"name":"get_time","arguments":{"tz":"UTC+8"}}}]}],"add_generation_prompt":false})json";

// K2-Thinking rendering of the assistant turn, after the generation prompt
// "<|im_assistant|>assistant<|im_middle|>".
const char* kK2Assistant =
    "<think>Need both tools.</think>Let me check.<|tool_calls_section_begin|><|tool_call_begin|>"
    "functions.get_weather:0<|tool_call_argument_begin|>{\"city\": "
    "\"北京\"}<|tool_call_end|><|tool_call_begin|>"
    "functions.get_time:1<|tool_call_argument_begin|>{\"tz\": \"UTC+8\"}<|tool_call_end|>"
    "<|tool_calls_section_end|><|im_end|>";

// One call with every XTML argument type (plus a key that needs attribute escaping), one whose
// arguments are a string (rendered as a json block).
const char* kK3Request =
    R"json({"messages":[{"role":"user","content":"Find it."},{"role":"assistant","reasoning_content":"Need a search.","content":"Searching.","tool_calls":[{"id":"c0","type":"function","function":{"name":"search","arguments":{"query":"rust \"async\" & <tokio>","limit":10,"ratio":0.25,"exact":false,"cursor":null,"filters":{"lang":"en","tags":["a","b"]},"fields":["title",2,true],"say \"hi\" & bye":"多语言 🚀"}}},{"id":"c1","type":"function","function":{"name":"create","arguments":"{\"title\": \"T\", \"n\": [1, 2]}"}}]}],"add_generation_prompt":false})json";

// Kimi-K3 rendering (thinking on) of the assistant turn, after the generation prompt
// "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>". With thinking off the turn is the
// part after "<|open|>response<|sep|>" (the prompt then ends there).
const char* kK3Assistant =
    "Need a search.<|close|>think<|sep|><|open|>response<|sep|>Searching.<|close|>response<|sep|>"
    "<|open|>tools<|sep|><|open|>call tool=\"search\" index=\"1\"<|sep|>"
    "<|open|>argument key=\"query\" type=\"string\"<|sep|>rust \"async\" & <tokio><|close|>argument<|sep|>"
    "<|open|>argument key=\"limit\" type=\"number\"<|sep|>10<|close|>argument<|sep|>"
    "<|open|>argument key=\"ratio\" type=\"number\"<|sep|>0.25<|close|>argument<|sep|>"
    "<|open|>argument key=\"exact\" type=\"boolean\"<|sep|>false<|close|>argument<|sep|>"
    "<|open|>argument key=\"cursor\" type=\"null\"<|sep|>null<|close|>argument<|sep|>"
    "<|open|>argument key=\"filters\" type=\"object\"<|sep|>{\"lang\": \"en\", \"tags\": [\"a\", \"b\"]}"
    "<|close|>argument<|sep|>"
    "<|open|>argument key=\"fields\" type=\"array\"<|sep|>[\"title\", 2, true]<|close|>argument<|sep|>"
    "<|open|>argument key=\"say &quot;hi&quot; &amp; bye\" type=\"string\"<|sep|>多语言 "
    "🚀<|close|>argument<|sep|>"
    "<|close|>call<|sep|><|open|>call tool=\"create\" index=\"2\"<|sep|>"
    "<|open|>json type=\"object\"<|sep|>{\"title\": \"T\", \"n\": [1, "
    "2]}<|close|>json<|sep|><|close|>call<|sep|>"
    "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>";

const Json& assistant(const Json& request) {
  return request["messages"][1];
}

// The arguments the request carried, as a JSON value (a string holds JSON text).
Json request_arguments(const Json& call) {
  const Json& args = call["function"]["arguments"];
  return args.is_string() ? Json::parse(args.get<std::string>()) : args;
}

void expect_reads_back(const ParserConfig& config, std::string_view output, const Json& request,
                       bool with_reasoning, const std::vector<std::string>& ids) {
  testing::Run run = testing::check_all_chunkings(config, output, 200, testing::test_seed());
  const ParseResult& r = run.result;
  EXPECT_TRUE(r.errors.empty()) << testing::describe(r);
  EXPECT_EQ(r.reasoning, with_reasoning ? assistant(request)["reasoning_content"].get<std::string>() : "");
  EXPECT_EQ(r.reasoning_ended, with_reasoning);
  EXPECT_EQ(r.content, assistant(request)["content"].get<std::string>());
  EXPECT_TRUE(r.stop_seen);
  const Json& calls = assistant(request)["tool_calls"];
  ASSERT_EQ(r.tool_calls.size(), calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(r.tool_calls[i].id, ids[i]);
    EXPECT_EQ(r.tool_calls[i].name, calls[i]["function"]["name"].get<std::string>());
    // ordered_json equality also compares key order: arguments keep the generated order.
    EXPECT_EQ(Json::parse(r.tool_calls[i].arguments), request_arguments(calls[i]))
        << r.tool_calls[i].arguments;
  }
}

TEST(TemplateRoundTrip, K2ThinkingAssistantTurn) {
  Json request = Json::parse(kK2Request);
  expect_reads_back({.family = ModelFamily::KimiK2}, kK2Assistant, request, true,
                    {"functions.get_weather:0", "functions.get_time:1"});
  // K2 passes the arguments text through as the model wrote it.
  auto parser = make_output_parser({.family = ModelFamily::KimiK2});
  ASSERT_TRUE(parser.ok());
  (*parser)->feed(kK2Assistant);
  (*parser)->finish();
  EXPECT_EQ((*parser)->result().tool_calls.at(0).arguments, "{\"city\": \"北京\"}");
}

TEST(TemplateRoundTrip, K3AssistantTurnThinkingOn) {
  expect_reads_back({.family = ModelFamily::KimiK3, .starts_in_reasoning = true}, kK3Assistant,
                    Json::parse(kK3Request), true, {"search_0", "create_1"});
}

TEST(TemplateRoundTrip, K3AssistantTurnThinkingOff) {
  std::string_view output = kK3Assistant;
  output.remove_prefix(output.find("<|open|>response<|sep|>") +
                       std::string_view("<|open|>response<|sep|>").size());
  expect_reads_back({.family = ModelFamily::KimiK3}, output, Json::parse(kK3Request), false,
                    {"search_0", "create_1"});
}

// Renders `request` (plus extra top-level keys) with a shared template; "" with a skip note when
// python3 or jinja2 is missing.
std::string render(const char* template_name, Json request) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("rill_parsers_" + std::to_string(std::hash<std::string>{}(request.dump())));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "request.json") << request.dump();
  std::string script = rill::testing::source_dir() + "/tests/text/jinja/render_reference.py";
  std::string command = "python3 '" + script + "' '" +
                        rill::testing::shared_path(std::string("chat_templates/") + template_name).string() +
                        "' < '" + (dir / "request.json").string() + "' > '" + (dir / "out.txt").string() +
                        "'";
  int rc = std::system(command.c_str());
  EXPECT_EQ(rc, 0) << command;
  std::stringstream out;
  out << std::ifstream(dir / "out.txt").rdbuf();
  std::filesystem::remove_all(dir);
  return out.str();
}

std::string after(const std::string& text, std::string_view prompt) {
  size_t at = text.rfind(prompt);
  return at == std::string::npos ? "<generation prompt not found>" : text.substr(at + prompt.size());
}

TEST(TemplateRoundTrip, RendersAsCommitted) {
  RILL_REQUIRE_SHARED_FILES(
      {"chat_templates/moonshotai-Kimi-K2-Thinking.jinja", "chat_templates/Kimi-K3.jinja"});
  if (std::system("python3 -c 'import jinja2' > /dev/null 2>&1") != 0) {
    // scripts/setup.sh installs python3-jinja2: under CI its absence is a broken machine, not a skip.
    if (::rill::testing::in_ci()) FAIL() << "CI=true but python3 cannot import jinja2 (scripts/setup.sh installs python3-jinja2)";
    GTEST_SKIP()
        << "python3 with jinja2 not available: the committed literals stay unchecked against the templates";
  }
  EXPECT_EQ(after(render("moonshotai-Kimi-K2-Thinking.jinja", Json::parse(kK2Request)),
                  "<|im_assistant|>assistant<|im_middle|>"),
            kK2Assistant);
  Json k3 = Json::parse(kK3Request);
  k3["thinking"] = true;
  EXPECT_EQ(
      after(render("Kimi-K3.jinja", k3), "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>"),
      kK3Assistant);
  k3["thinking"] = false;
  std::string off = kK3Assistant;
  off = off.substr(off.find("<|open|>response<|sep|>") + std::string_view("<|open|>response<|sep|>").size());
  EXPECT_EQ(
      after(render("Kimi-K3.jinja", k3), "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>"),
      off);
}

}  // namespace
}  // namespace rill::text
