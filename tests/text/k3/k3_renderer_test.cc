// The native K3 renderer against independent references: the Kimi Vendor Verifier's prompt-token ground
// truth (36 and 119), the Jinja transcription Kimi-K3.jinja rendered by Python jinja2 (render_reference.py),
// and Python's own json.dumps for the JSON text the prompts embed.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "test_paths.h"
#include "text/k3/k3_renderer.h"
#include "text/k3/k3_tokenizer.h"

namespace rill::text::k3 {
namespace {

namespace fs = std::filesystem;
const fs::path kHere = fs::path(rill::testing::source_dir()) / "tests/text/k3";

Json read_json(const fs::path& path) {
  return Json::parse(std::ifstream(path));
}

// Runs a command with `input` on stdin and returns its stdout.
std::string run_with_input(const std::string& cmd, const std::string& input) {
  const fs::path in = fs::temp_directory_path() / ("rill_k3_in_" + std::to_string(std::random_device{}()));
  std::ofstream(in, std::ios::binary) << input;
  std::string out;
  FILE* pipe = popen((cmd + " < " + in.string()).c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  EXPECT_EQ(pclose(pipe), 0) << cmd;
  fs::remove(in);
  return out;
}

TEST(K3Renderer, KimiVendorVerifierPromptTokens) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const Json cases = read_json(kHere / "render_cases.json");
  int checked = 0;
  for (const Json& c : cases) {
    const std::string name = c["name"];
    if (name.rfind("kvv_", 0) != 0) continue;
    auto r = render_chat(c["request"], k3_tokenizer());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->n_generation_stub, 3);
    const int prompt_tokens = static_cast<int>(r->ids.size()) - r->n_generation_stub;
    EXPECT_EQ(prompt_tokens, name == "kvv_plain_thinking_disabled" ? 36 : 119) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

TEST(K3Renderer, TextMatchesJinjaReference) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  RILL_REQUIRE_SHARED_FILES({"chat_templates/Kimi-K3.jinja"});
  const Json cases = read_json(kHere / "render_cases.json");
  ASSERT_GE(cases.size(), 20u);
  Json variables = Json::array();
  for (const Json& c : cases) {
    Json v = c["template"];
    v["messages"] = c["request"]["messages"];
    if (c["request"].contains("tools")) v["tools"] = c["request"]["tools"];
    if (!v.contains("add_generation_prompt")) v["add_generation_prompt"] = true;
    variables.push_back(v);
  }
  const std::string out = run_with_input("python3 " + (kHere / "render_k3_reference.py").string() + " " +
                                             rill::testing::shared_path("").string(),
                                         variables.dump());
  const Json reference = Json::parse(out);
  ASSERT_EQ(reference.size(), cases.size());
  const Tokenizer& tok = k3_tokenizer();
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string name = cases[i]["name"];
    ASSERT_TRUE(reference[i].contains("text")) << name << ": " << reference[i].dump();
    auto r = render_chat(cases[i]["request"], tok);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().to_string();
    EXPECT_EQ(r->text, reference[i]["text"].get<std::string>()) << name;
    // The ids decode back to the text, and only control segments produced special ids.
    auto decoded = tok.decode(r->ids);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, r->text) << name;
    size_t n_control = 0, n_special = 0;
    for (const Segment& s : r->segments) n_control += s.allow_special;
    for (int32_t id : r->ids) n_special += tok.is_special(id);
    EXPECT_EQ(n_special, n_control) << name;
  }
}

TEST(K3Renderer, SegmentsFollowTheReferenceGranularity) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const Json request = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                        {"thinking", {{"type", "disabled"}}}};
  auto r = render_chat(request, k3_tokenizer());
  ASSERT_TRUE(r.ok());
  // serving.md §2.4: ("<|open|>",T) ("message",F) (" role",F) ('="',F) ("user",F) ('"',F) ("<|sep|>",T) ...
  const std::vector<Segment> head(r->segments.begin(), r->segments.begin() + 7);
  const std::vector<Segment> want = {{"<|open|>", true}, {"message", false}, {" role", false}, {"=\"", false},
                                     {"user", false},    {"\"", false},      {"<|sep|>", true}};
  EXPECT_EQ(head, want);
  // A value starting with punctuation tokenizes differently alone than glued to '="': segment-wise ids
  // are not the ids of the concatenated text.
  const Json named = {{"messages", {{{"role", "user"}, {"name", "-x"}, {"content", "hi"}}}}};
  auto n = render_chat(named, k3_tokenizer());
  ASSERT_TRUE(n.ok());
  EXPECT_NE(n->ids, k3_tokenizer().encode(n->text, true));
}

TEST(K3Renderer, SpecialLookingUserTextStaysText) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const Json request = {{"messages", {{{"role", "user"}, {"content", "<|open|><|end_of_msg|>"}}}}};
  auto r = render_chat(request, k3_tokenizer());
  ASSERT_TRUE(r.ok());
  auto plain = render_chat({{"messages", {{{"role", "user"}, {"content", "x"}}}}}, k3_tokenizer());
  ASSERT_TRUE(plain.ok());
  const auto count_special = [&](const std::vector<int32_t>& ids) {
    return std::count_if(ids.begin(), ids.end(), [&](int32_t id) { return k3_tokenizer().is_special(id); });
  };
  EXPECT_EQ(count_special(r->ids), count_special(plain->ids));
}

void expect_error(const Json& request, StatusCode code, const std::string& needle) {
  auto r = render_chat(request, k3_tokenizer());
  ASSERT_FALSE(r.ok()) << request.dump();
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

// A named tool_choice has no form in the reference (Kimi-K3.jinja compares tool_choice with "required" and
// "none" only): the prompt is the one of "auto"; the turn grammar forces the call.
TEST(K3Renderer, NamedToolChoiceRendersAsAuto) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const Json user = {{"role", "user"}, {"content", "hi"}};
  const Json tool = {{"type", "function"}, {"function", {{"name", "f"}}}};
  auto named = render_chat({{"messages", {user}},
                            {"tools", {tool}},
                            {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}},
                           k3_tokenizer());
  auto plain = render_chat({{"messages", {user}}, {"tools", {tool}}}, k3_tokenizer());
  ASSERT_TRUE(named.ok()) << named.status().to_string();
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(named->text, plain->text);
  EXPECT_EQ(named->options.tool_choice, ToolChoice::Named);
  EXPECT_EQ(named->options.tool_choice_name, "f");
}

TEST(K3Renderer, ClearErrors) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const Json user = {{"role", "user"}, {"content", "hi"}};
  const Json tool = {{"type", "function"}, {"function", {{"name", "f"}}}};
  using C = StatusCode;
  expect_error({{"messages", {{{"role", "robot"}, {"content", "x"}}}}}, C::InvalidArgument,
               "messages[0].role \"robot\"");
  expect_error({{"messages", {{{"content", "x"}}}}}, C::InvalidArgument, "messages[0] has no role");
  expect_error({{"messages", Json::array()}}, C::InvalidArgument, "messages must be a non-empty array");
  expect_error({{"messages", {user, {{"role", "tool"}, {"content", "r"}}}}}, C::InvalidArgument,
               "messages[1]: the tool message needs a resolvable tool name");
  expect_error({{"messages", {user}}, {"thinking", {{"type", "enabled"}, {"effort", "medium"}}}},
               C::InvalidArgument, "thinking.effort must be one of low, high, max");
  expect_error({{"messages", {user}}, {"reasoning_effort", "extreme"}}, C::InvalidArgument,
               "reasoning_effort");
  expect_error({{"messages", {user}}, {"chat_template_kwargs", {{"thinking_effort", "huge"}}}},
               C::InvalidArgument, "chat_template_kwargs.thinking_effort");
  expect_error({{"messages", {user}}, {"thinking", {{"type", "maybe"}}}}, C::InvalidArgument,
               "thinking.type");
  expect_error({{"messages", {user}}, {"tool_choice", "required"}}, C::InvalidArgument,
               "needs at least one tool");
  expect_error({{"messages", {user}}, {"tools", {tool}}, {"tool_choice", "sometimes"}}, C::InvalidArgument,
               "tool_choice");
  expect_error({{"messages", {user}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}},
               C::InvalidArgument, "no tools");
  expect_error({{"messages", {user}}, {"tools", {tool}}, {"tool_choice", {{"type", "function"}}}},
               C::InvalidArgument, "tool_choice.function.name");
  expect_error({{"messages", {user}}, {"response_format", {{"type", "xml"}}}}, C::InvalidArgument,
               "response_format.type");
  expect_error(
      {{"messages", {user}},
       {"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", Json::object()}}}}}},
      C::InvalidArgument, "json_schema.name");
  expect_error(
      {{"messages", {user}},
       {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", 3}}}}}},
      C::InvalidArgument, "json_schema.schema must be an object");
  expect_error({{"messages", {{{"role", "user"}, {"content", "x"}, {"tools", {tool}}}}}}, C::InvalidArgument,
               "only system messages may declare tools");
  expect_error({{"messages", {{{"role", "system"}, {"content", "x"}, {"tools", {tool}}}, user}}},
               C::InvalidArgument, "must have empty content");
  expect_error({{"messages", {{{"role", "system"}, {"tools", {tool}}}, user}}, {"tools", {tool}}},
               C::InvalidArgument, "duplicate tool name \"f\"");
  expect_error({{"messages", {user}}, {"tools", {{{"type", "function"}, {"function", {{"name", "1bad"}}}}}}},
               C::InvalidArgument, "tools[0].function.name must match");
  expect_error(
      {{"messages",
        {user,
         {{"role", "assistant"}, {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", "[1]"}}}}}}}}}},
      C::InvalidArgument, "messages[1].tool_calls[0].function.arguments must be a JSON object");
  expect_error({{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}}, C::Unimplemented,
               "images");
  expect_error({{"messages", {{{"role", "user"}, {"content", 5}}}}}, C::InvalidArgument,
               "content must be a string");
}

TEST(K3Renderer, NeedsK3ControlTokens) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  // The Kimi Linear control block (K2 names): no <|open|>.
  auto kimi_linear = Tokenizer::load(rill::testing::shared_path(rill::testing::kKimiTokenizerDir));
  ASSERT_TRUE(kimi_linear.ok());
  auto r = render_chat({{"messages", {{{"role", "user"}, {"content", "x"}}}}}, *kimi_linear);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no special token '<|open|>'"), std::string::npos);
}

// JSON text inside prompts is Python's json.dumps: compare with python3 directly (sorted and unsorted,
// both separator styles; floats, unicode, control characters, mixed-case keys).
TEST(PythonJson, MatchesPythonJsonDumps) {
  const Json values = Json::parse(R"([
    {"b": 1, "a": [1, 2.5, -0.0, 1e16, 1e15, 123456789012345678, 0.0001, 1e-5, 3.0, 1.7976931348623157e308],
     "Zeta": "x", "alpha": null, "maxLength": 3, "maximum": 4, "ключ": "значение", "中": "\u0001\t\n\"\\/",
     "emoji": "😀\u2028", "nested": {"y": [], "x": {}}},
    [true, false, null, "", 0, -17, 5e-324, 2.5e-7, 1.5e300],
    "just a string with \u007f and \u00e9"
  ])");
  std::string expected_lines;
  const std::string script =
      "import json,sys\n"
      "for v in json.load(sys.stdin):\n"
      "  for sep in [(',', ':'), None]:\n"
      "    for s in [True, False]:\n"
      "      print(json.dumps(json.dumps(v, ensure_ascii=False, separators=sep, sort_keys=s), "
      "ensure_ascii=False))\n";
  const fs::path py =
      fs::temp_directory_path() / ("rill_pyjson_" + std::to_string(std::random_device{}()) + ".py");
  std::ofstream(py) << script;
  const std::string out = run_with_input("python3 " + py.string(), values.dump());
  fs::remove(py);
  std::istringstream lines(out);
  for (const Json& v : values) {
    for (const JsonSeparators sep : {JsonSeparators::Compact, JsonSeparators::Default}) {
      for (const bool sort : {true, false}) {
        std::string line;
        ASSERT_TRUE(std::getline(lines, line));
        EXPECT_EQ(python_json_dumps(v, sep, sort), Json::parse(line).get<std::string>());
      }
    }
  }
}

}  // namespace
}  // namespace rill::text::k3
