// The five real chat templates of the shared test data (chat_templates/), each over the conversations of
// chat_conversations.json (system/user/assistant/tool roles, tool calls with string and object
// arguments, tool declarations, multimodal parts, reasoning_content, unicode, empty content, ...) and the
// template's own kwargs, rendered by rill and live by jinja2 (render_reference.py): byte-identical output,
// or an error in both (with raise_exception's text).
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "shared_data.h"
#include "test_paths.h"
#include "test_seed.h"
#include "text/jinja/jinja_reference.h"
#include "text/jinja/template.h"

namespace rill::text::jinja {
namespace {

using testing::RenderCase;

const std::string kTemplates = rill::testing::shared_path("chat_templates/").string();

struct TemplateUnderTest {
  std::string file;
  std::vector<const char*> variants;  // extra variables (template kwargs) merged into each conversation
};

std::vector<TemplateUnderTest> templates() {
  return {
      {"moonshotai-Kimi-K2.jinja", {"{}"}},
      {"moonshotai-Kimi-K2-Thinking.jinja", {"{}"}},
      {"Kimi-K3.jinja",
       {"{}", R"({"thinking": false})", R"({"thinking_effort": "low", "tool_choice": "required"})",
        R"({"tool_choice": "none", "response_format": {"type": "json_schema", "json_schema": {"name": "r",
            "schema": {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}}}})",
        R"({"response_format": {"type": "json_object"}, "thinking_effort": "high"})",
        R"({"thinking_effort": "bogus"})"}},
      {"deepseek-ai-DeepSeek-V3.1.jinja", {"{}", R"({"thinking": true})"}},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", {"{}"}},
  };
}

// The shared test data every test here reads.
std::vector<std::string> template_files() {
  std::vector<std::string> files;
  for (const TemplateUnderTest& t : templates()) files.push_back("chat_templates/" + t.file);
  return files;
}

nlohmann::ordered_json conversations() {
  std::ifstream in(rill::testing::source_dir() + "/tests/text/jinja/chat_conversations.json");
  return nlohmann::ordered_json::parse(in);
}

const nlohmann::ordered_json& conversation(const nlohmann::ordered_json& convs, std::string_view name) {
  for (const auto& c : convs) {
    if (c["name"] == name) return c;
  }
  ADD_FAILURE() << "no conversation named " << name;
  return convs[0];
}

// A conversation as template variables: everything but its name; add_generation_prompt defaults to true
// (the OpenAI server default), then the variant's kwargs.
nlohmann::ordered_json variables_for(const nlohmann::ordered_json& conversation, const char* variant) {
  nlohmann::ordered_json vars = conversation;
  vars.erase("name");
  if (!vars.contains("add_generation_prompt")) vars["add_generation_prompt"] = true;
  const nlohmann::ordered_json kwargs = nlohmann::ordered_json::parse(variant);
  for (const auto& [k, v] : kwargs.items()) vars[k] = v;
  return vars;
}

TEST(ChatTemplates, AllTemplatesMatchJinja2) {
  RILL_REQUIRE_SHARED_FILES(template_files());
  const nlohmann::ordered_json convs = conversations();
  ASSERT_GE(convs.size(), 20u);
  std::vector<RenderCase> cases;
  for (const TemplateUnderTest& t : templates()) {
    for (const char* variant : t.variants) {
      for (const auto& conv : convs) {
        cases.push_back(RenderCase{t.file + " " + conv["name"].get<std::string>() + " " + variant, "",
                                   kTemplates + t.file, variables_for(conv, variant)});
      }
    }
  }
  const std::vector<testing::ReferenceResult> reference = testing::expect_same_as_jinja2(cases);

  // The comparison above also accepts "both fail"; make sure most conversations really render.
  for (const TemplateUnderTest& t : templates()) {
    int rendered = 0;
    for (size_t i = 0; i < cases.size() && i < reference.size(); ++i) {
      rendered += cases[i].template_file == kTemplates + t.file && reference[i].ok;
    }
    EXPECT_GE(rendered, 20) << t.file << ": too few conversations render in jinja2 to be a meaningful test";
  }
}

// Random conversations: strings drawn from a pool of awkward characters (CJK, emoji, RTL, combining marks,
// quotes, backslashes, control characters, Jinja and special-token look-alikes), random roles, tool calls
// with string or nested-object arguments (floats, big ints, unicode keys). RILL_TEST_SEED reproduces a run.
class RandomConversation {
 public:
  explicit RandomConversation(uint32_t seed) : rng_(seed) {}

  nlohmann::ordered_json make() {
    nlohmann::ordered_json conv{{"name", "random"}};
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (pick(3) == 0) messages.push_back({{"role", "system"}, {"content", text()}});
    const int turns = 1 + pick(5);
    for (int t = 0; t < turns; ++t) {
      messages.push_back(
          {{"role", "user"}, {"content", pick(6) == 0 ? parts() : nlohmann::ordered_json(text())}});
      if (t + 1 == turns && pick(2) == 0) break;
      nlohmann::ordered_json reply{
          {"role", "assistant"},
          {"content", pick(8) == 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(text())}};
      if (pick(3) == 0) reply["reasoning_content"] = text();
      if (pick(3) == 0) {
        nlohmann::ordered_json calls = nlohmann::ordered_json::array();
        const int n = 1 + pick(2);
        for (int c = 0; c < n; ++c) {
          const std::string id = "functions.tool_" + std::to_string(c) + ":" + std::to_string(t);
          nlohmann::ordered_json args = object(2);
          calls.push_back({{"id", id},
                           {"type", "function"},
                           {"function",
                            {{"name", "tool_" + std::to_string(c)},
                             {"arguments", pick(2) ? nlohmann::ordered_json(args.dump()) : args}}}});
        }
        reply["tool_calls"] = calls;
        messages.push_back(reply);
        for (const auto& call : calls) {
          messages.push_back({{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", text()}});
        }
        continue;
      }
      messages.push_back(reply);
    }
    conv["messages"] = messages;
    if (pick(2) == 0) {
      conv["tools"] = nlohmann::ordered_json::array(
          {{{"type", "function"},
            {"function", {{"name", "tool_0"}, {"description", text()}, {"parameters", object(3)}}}}});
    }
    conv["add_generation_prompt"] = pick(4) != 0;
    return conv;
  }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint32_t>(n)); }

  std::string text() {
    static const char* const kPieces[] = {"hello",
                                          " ",
                                          "  ",
                                          "\n",
                                          "\n\n",
                                          "\t",
                                          "你好",
                                          "世界",
                                          "😀",
                                          "👍🏽",
                                          "👨‍👩‍👧",
                                          "مرحبا",
                                          "שלום",
                                          "e\u0301",
                                          "\"quoted\"",
                                          "it's",
                                          "back\\slash",
                                          "{{ x }}",
                                          "{% if %}",
                                          "<|im_end|>",
                                          "<think>",
                                          "</think>",
                                          "<|open|>",
                                          "\x01",
                                          "\x7f",
                                          "\u00a0",
                                          "\u2028",
                                          "Σ",
                                          "ß",
                                          "İ",
                                          "0.1",
                                          "-1e-7",
                                          "&amp;",
                                          "<b>",
                                          "",
                                          "\r\n",
                                          "   padded   ",
                                          "ℌ",
                                          "ﬁ"};
    std::string s;
    const int n = pick(7);
    for (int i = 0; i < n; ++i) s += kPieces[pick(static_cast<int>(std::size(kPieces)))];
    return s;
  }

  nlohmann::ordered_json scalar() {
    switch (pick(9)) {
      case 0:
        return nlohmann::ordered_json(text());
      case 1:
        return nlohmann::ordered_json(static_cast<int64_t>(rng_()) - (1ll << 31));
      case 2:
        return nlohmann::ordered_json(std::ldexp(static_cast<double>(rng_()), pick(120) - 80));
      case 3:
        return nlohmann::ordered_json(pick(2) == 0);
      case 4:
        return nlohmann::ordered_json();
      case 5:
        return nlohmann::ordered_json(0.1 * pick(1000));
      case 6:
        return nlohmann::ordered_json(1e16 * (1 + pick(9)));
      case 7:
        return nlohmann::ordered_json(-0.0);
      default:
        return nlohmann::ordered_json(9007199254740993ll * (1 + pick(1000)));
    }
  }

  nlohmann::ordered_json object(int depth) {
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    const int n = pick(4);
    for (int i = 0; i < n; ++i) {
      const std::string key = pick(3) == 0 ? text() : "k" + std::to_string(pick(20));
      o[key] = depth > 0 && pick(3) == 0 ? (pick(2) ? object(depth - 1) : list(depth - 1)) : scalar();
    }
    return o;
  }

  nlohmann::ordered_json list(int depth) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    const int n = pick(4);
    for (int i = 0; i < n; ++i) a.push_back(depth > 0 && pick(4) == 0 ? object(depth - 1) : scalar());
    return a;
  }

  nlohmann::ordered_json parts() {
    nlohmann::ordered_json p = nlohmann::ordered_json::array();
    const int n = 1 + pick(3);
    for (int i = 0; i < n; ++i) {
      if (pick(4) == 0) {
        p.push_back({{"type", "image_url"}, {"image_url", {{"url", "https://example.com/x.png"}}}});
      } else {
        p.push_back({{"type", "text"}, {"text", text()}});
      }
    }
    return p;
  }

  std::mt19937 rng_;
};

TEST(ChatTemplates, RandomConversationsMatchJinja2) {
  RILL_REQUIRE_SHARED_FILES(template_files());
  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  RandomConversation gen(seed);
  std::vector<RenderCase> cases;
  for (int i = 0; i < 40; ++i) {
    const nlohmann::ordered_json conv = gen.make();
    for (const TemplateUnderTest& t : templates()) {
      cases.push_back(RenderCase{t.file + " random " + std::to_string(i), "", kTemplates + t.file,
                                 variables_for(conv, t.variants[i % t.variants.size()])});
    }
  }
  testing::expect_same_as_jinja2(cases);
}

// The reference script itself, as a process: stdout and exit status (2 on a template error, with the
// message on stderr) against rill, for a sample of requests per template.
struct CliRun {
  int status = -1;
  std::string out;
};

CliRun run_reference_cli(const std::string& template_path, const nlohmann::ordered_json& request) {
  char path[] = "/tmp/rill_cli_request_XXXXXX";
  const int fd = mkstemp(path);
  { std::ofstream(path) << request.dump(); }
  const std::string cmd = "python3 " + rill::testing::source_dir() +
                          "/tests/text/jinja/render_reference.py " + template_path + " < " + path + " 2>&1";
  CliRun run;
  if (FILE* pipe = popen(cmd.c_str(), "r")) {
    char buf[65536];
    for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) run.out.append(buf, n);
    const int raw = pclose(pipe);
    run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  }
  close(fd);
  unlink(path);
  return run;
}

TEST(ChatTemplates, ReferenceScriptProcessAgrees) {
  RILL_REQUIRE_SHARED_FILES(template_files());
  const nlohmann::ordered_json convs = conversations();
  const std::vector<std::pair<std::string, nlohmann::ordered_json>> requests = {
      {"moonshotai-Kimi-K2.jinja", variables_for(conversation(convs, "tool_call_string_args"), "{}")},
      {"moonshotai-Kimi-K2-Thinking.jinja",
       variables_for(conversation(convs, "tool_calls_then_reasoning"), "{}")},
      {"Kimi-K3.jinja", variables_for(conversation(convs, "parallel_tool_calls"), R"({"thinking": false})")},
      {"Kimi-K3.jinja",
       variables_for(conversation(convs, "missing_role"), "{}")},  // message without a role: raise_exception
      {"deepseek-ai-DeepSeek-V3.1.jinja",
       variables_for(conversation(convs, "null_content_tool_calls"), "{}")},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
       variables_for(conversation(convs, "multi_turn"), "{}")},
  };
  for (const auto& [file, request] : requests) {
    SCOPED_TRACE(file + " " + request.dump().substr(0, 200));
    const CliRun want = run_reference_cli(kTemplates + file, request);
    auto tmpl = Template::parse(testing::read_file(kTemplates + file), file);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().message();
    auto got = tmpl->render(request);
    if (want.status == 0) {
      ASSERT_TRUE(got.ok()) << got.status().message();
      EXPECT_EQ(*got, want.out);
      continue;
    }
    EXPECT_EQ(want.status, 2) << want.out;
    ASSERT_FALSE(got.ok()) << "jinja2 fails with: " << want.out;
    const std::string prefix = "template error: ";
    ASSERT_EQ(want.out.rfind(prefix, 0), 0u) << want.out;
    std::string message = want.out.substr(prefix.size());
    while (!message.empty() && message.back() == '\n') message.pop_back();
    EXPECT_NE(got.status().message().find(message), std::string::npos) << got.status().message();
  }
}

}  // namespace
}  // namespace rill::text::jinja
