// ChatTemplate: loading a checkpoint's template (chat_template.jinja, tokenizer_config.json string or named
// list), turning OpenAI requests into template variables, and rendering them. Renders are compared live
// with Python's jinja2 (render_reference.py's environment) given the variables transformers would pass:
// messages, tools, documents, add_generation_prompt, reasoning_effort, the special tokens, then
// chat_template_kwargs.
#include "text/chat/chat_template.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include <gtest/gtest.h>

#include "shared_data.h"
#include "test_paths.h"
#include "text/jinja/jinja_reference.h"

namespace rill::text {
namespace {

using Json = nlohmann::ordered_json;
using jinja::testing::ReferenceResult;
using jinja::testing::RenderCase;

const std::string kTemplates = rill::testing::shared_path("chat_templates/").string();

class TempDir {
 public:
  TempDir() {
    char path[] = "/tmp/rill_chat_XXXXXX";
    path_ = mkdtemp(path);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path_ / name) << text; }

 private:
  std::filesystem::path path_;
};

Json kimi_config(const std::string& chat_template) {
  return Json{{"bos_token", "[BOS]"},
              {"eos_token", "[EOS]"},
              {"unk_token", "[UNK]"},
              {"pad_token", "[PAD]"},
              {"chat_template", chat_template}};
}

Json deepseek_config(const std::string& chat_template) {
  return Json{
      {"bos_token", {{"__type", "AddedToken"}, {"content", "<｜begin▁of▁sentence｜>"}, {"lstrip", false}}},
      {"eos_token", {{"__type", "AddedToken"}, {"content", "<｜end▁of▁sentence｜>"}}},
      {"chat_template", chat_template}};
}

// The variables transformers' apply_chat_template receives from vLLM for `request`, written out plainly
// as the contract (chat_request.h). nullopt where rill must refuse: a non-text part for a template that
// treats content as a string.
std::optional<Json> reference_variables(const Json& request, const Json& config, bool string_content,
                                        bool parse_arguments) {
  Json messages = request["messages"];
  for (Json& m : messages) {
    if (string_content && m.contains("content") && m["content"].is_array()) {
      std::string joined;
      for (size_t j = 0; j < m["content"].size(); ++j) {
        const Json& part = m["content"][j];
        if (part["type"] != "text") return std::nullopt;
        joined += (j ? "\n" : "") + part["text"].get<std::string>();
      }
      m["content"] = joined;
    }
    if (parse_arguments && m.value("role", "") == "assistant" && m.contains("tool_calls")) {
      for (Json& call : m["tool_calls"]) {
        Json& args = call["function"]["arguments"];
        if (args.is_string()) args = Json::parse(args.get<std::string>());
      }
    }
  }
  Json vars{{"messages", messages},
            {"tools", request.value("tools", Json())},
            {"documents", Json()},
            {"add_generation_prompt", request.value("add_generation_prompt", true)},
            {"reasoning_effort", Json()}};
  for (const char* token : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    if (!config.contains(token)) continue;
    vars[token] = config[token].is_object() ? config[token]["content"] : config[token];
  }
  const Json kwargs = request.value("chat_template_kwargs", Json::object());
  for (const auto& [k, v] : kwargs.items()) vars[k] = v;
  return vars;
}

// A chat_conversations.json entry as an OpenAI request; template kwargs go to chat_template_kwargs.
Json to_request(const Json& conversation, const Json& kwargs) {
  Json request = conversation;
  request.erase("name");
  Json template_kwargs = kwargs;
  for (const char* key : {"bos_token", "eos_token"}) {  // conversation-level overrides are template kwargs
    if (request.contains(key)) template_kwargs[key] = request[key], request.erase(key);
  }
  if (!template_kwargs.empty()) request["chat_template_kwargs"] = template_kwargs;
  return request;
}

struct Expectation {
  std::string name;
  Result<std::string> got;
  std::optional<Json> variables;  // nullopt: rill must fail
  std::string template_source;
};

// Renders all expectations' reference variables with jinja2 in one process and compares.
void expect_matches(const std::vector<Expectation>& expectations) {
  std::vector<RenderCase> cases;
  std::vector<size_t> index;
  for (size_t i = 0; i < expectations.size(); ++i) {
    if (!expectations[i].variables) continue;
    cases.push_back(
        RenderCase{expectations[i].name, expectations[i].template_source, "", *expectations[i].variables});
    index.push_back(i);
  }
  const std::vector<ReferenceResult> reference = jinja::testing::render_with_jinja2(cases);
  for (size_t i = 0; i < expectations.size(); ++i) {
    const Expectation& e = expectations[i];
    SCOPED_TRACE(e.name);
    if (!e.variables) {
      EXPECT_FALSE(e.got.ok()) << "rill should refuse this request";
      continue;
    }
    const size_t r = std::find(index.begin(), index.end(), i) - index.begin();
    ASSERT_LT(r, reference.size());
    if (!reference[r].ok) {
      EXPECT_FALSE(e.got.ok()) << "jinja2 fails (" << reference[r].message << ") but rill renders";
      if (reference[r].kind == "raised" && !e.got.ok()) {
        EXPECT_NE(e.got.status().message().find(reference[r].message), std::string::npos);
      }
      continue;
    }
    ASSERT_TRUE(e.got.ok()) << e.got.status().message();
    EXPECT_EQ(*e.got, reference[r].output);
  }
}

Json conversations() {
  std::ifstream in(rill::testing::source_dir() + "/tests/text/jinja/chat_conversations.json");
  return Json::parse(in);
}

Json conversation(std::string_view name) {
  for (const Json& c : conversations()) {
    if (c["name"] == name) return c;
  }
  ADD_FAILURE() << "no conversation named " << name;
  return Json::object();
}

TEST(ChatTemplate, RendersRequestsForEveryShippedTemplate) {
  struct Case {
    std::string file;
    Json (*config)(const std::string&);
    bool string_content;  // the template does not walk content parts: rill joins text parts
    Json kwargs;
  };
  const std::vector<Case> templates = {
      {"moonshotai-Kimi-K2.jinja", kimi_config, false, Json::object()},
      {"moonshotai-Kimi-K2-Thinking.jinja", kimi_config, false, Json::object()},
      {"Kimi-K3.jinja", kimi_config, false, Json{{"thinking", false}}},
      {"deepseek-ai-DeepSeek-V3.1.jinja", deepseek_config, true, Json{{"thinking", true}}},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", deepseek_config, true, Json::object()},
  };
  std::vector<std::string> files;
  for (const Case& t : templates) files.push_back("chat_templates/" + t.file);
  RILL_REQUIRE_SHARED_FILES(files);
  std::vector<Expectation> expectations;
  for (const Case& t : templates) {
    const std::string source = jinja::testing::read_file(kTemplates + t.file);
    const Json config = t.config(source);
    TempDir dir;
    dir.write("tokenizer_config.json", config.dump());
    auto chat = ChatTemplate::load(dir.path());
    ASSERT_TRUE(chat.ok()) << chat.status().message();
    for (const Json& conv : conversations()) {
      for (const Json& kwargs : {Json::object(), t.kwargs}) {
        const Json request = to_request(conv, kwargs);
        expectations.push_back({t.file + " " + conv["name"].get<std::string>() + " " + kwargs.dump(),
                                chat->render(request),
                                reference_variables(request, config, t.string_content, false), source});
      }
    }
  }
  expect_matches(expectations);
}

TEST(ChatTemplate, ParsesToolArgumentsWhenAsked) {
  RILL_REQUIRE_SHARED_FILES({"chat_templates/moonshotai-Kimi-K2-Thinking.jinja"});
  const std::string source = jinja::testing::read_file(kTemplates + "moonshotai-Kimi-K2-Thinking.jinja");
  const Json config = kimi_config(source);
  ChatTemplateOptions options;
  options.parse_tool_arguments = true;
  TempDir dir;
  dir.write("tokenizer_config.json", config.dump());
  auto chat = ChatTemplate::load(dir.path(), options);
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  std::vector<Expectation> expectations;
  for (const Json& conv : conversations()) {
    const Json request = to_request(conv, Json::object());
    expectations.push_back({"parsed " + conv["name"].get<std::string>(), chat->render(request),
                            reference_variables(request, config, false, true), source});
  }
  expect_matches(expectations);

  Json bad = to_request(conversation("tool_call_string_args"), Json::object());
  bad["messages"][1]["tool_calls"][0]["function"]["arguments"] = "{not json";
  auto r = chat->render(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("messages[1].tool_calls[0].function.arguments"), std::string::npos)
      << r.status().message();
}

TEST(ChatTemplate, TemplateFileWinsOverTokenizerConfig) {
  TempDir dir;
  const std::string file_template = "FILE{% for m in messages %}|{{ m.role }}:{{ m.content }}{% endfor %}";
  dir.write("tokenizer_config.json", kimi_config("CONFIG {{ messages|length }}").dump());
  dir.write("chat_template.jinja", file_template);
  auto chat = ChatTemplate::load(dir.path());
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  const Json request = to_request(conversation("multi_turn"), Json::object());
  expect_matches({{"file wins", chat->render(request),
                   reference_variables(request, kimi_config(""), false, false), file_template}});
}

TEST(ChatTemplate, NamedTemplatesPickToolUseForToolRequests) {
  TempDir dir;
  const std::string plain = "PLAIN {{ messages[0].content }} {{ tools }}";
  const std::string tool_use = "TOOLS {{ tools|tojson }} {{ bos_token }}";
  Json config = kimi_config("");
  config["chat_template"] = Json::array(
      {Json{{"name", "default"}, {"template", plain}}, Json{{"name", "tool_use"}, {"template", tool_use}}});
  dir.write("tokenizer_config.json", config.dump());
  auto chat = ChatTemplate::load(dir.path());
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  EXPECT_EQ(chat->template_names(), (std::vector<std::string>{"default", "tool_use"}));
  const Json without = to_request(conversation("single_user"), Json::object());
  const Json with = to_request(conversation("tools_declared"), Json::object());
  expect_matches(
      {{"default", chat->render(without), reference_variables(without, config, false, false), plain},
       {"tool_use", chat->render(with), reference_variables(with, config, false, false), tool_use}});

  config["chat_template"] = Json::array({Json{{"name", "tool_use"}, {"template", tool_use}}});
  dir.write("tokenizer_config.json", config.dump());
  auto only_tools = ChatTemplate::load(dir.path());
  ASSERT_TRUE(only_tools.ok());
  EXPECT_TRUE(only_tools->render(with).ok());
  EXPECT_FALSE(only_tools->render(without).ok());
}

TEST(ChatTemplate, LoadErrorsNameTheFile) {
  TempDir none;
  none.write("tokenizer_config.json", Json{{"bos_token", "x"}}.dump());
  auto missing = ChatTemplate::load(none.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::NotFound);

  TempDir broken;
  broken.write("tokenizer_config.json", "{ not json");
  EXPECT_FALSE(ChatTemplate::load(broken.path()).ok());

  TempDir syntax;
  syntax.write("chat_template.jinja", "line one\n{% if x %}\nno endif");
  auto bad = ChatTemplate::load(syntax.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("chat_template.jinja:"), std::string::npos) << bad.status().message();

  TempDir bad_list;
  bad_list.write("tokenizer_config.json",
                 Json{{"chat_template", Json::array({Json{{"name", "default"}}})}}.dump());
  EXPECT_FALSE(ChatTemplate::load(bad_list.path()).ok());
}

TEST(ChatTemplate, RejectsMalformedRequests) {
  auto chat = ChatTemplate::from_source("{{ messages|length }}", SpecialTokens{}, "t");
  ASSERT_TRUE(chat.ok());
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"([])", "JSON object"},
      {R"({})", "messages"},
      {R"({"messages": {}})", "messages"},
      {R"({"messages": [1]})", "messages[0]"},
      {R"({"messages": [], "chat_template": "x"})", "chat_template"},
      {R"({"messages": [], "continue_final_message": true})", "continue_final_message"},
      {R"({"messages": [], "chat_template_kwargs": [1]})", "chat_template_kwargs"},
      {R"({"messages": [], "chat_template_kwargs": {"messages": []}})", "messages"},
      {R"({"messages": [], "add_generation_prompt": "yes"})", "add_generation_prompt"},
  };
  for (const auto& [request, field] : bad) {
    auto r = chat->render(Json::parse(request));
    ASSERT_FALSE(r.ok()) << request;
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message();
  }
  auto image = ChatTemplate::from_source("{{ messages[0].content }}", SpecialTokens{}, "string-content");
  ASSERT_TRUE(image.ok());
  auto r = image->render(to_request(conversation("multimodal_parts"), Json::object()));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("messages[0].content[1]"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace rill::text
