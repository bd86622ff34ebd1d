// `rill render MODEL_DIR`: an OpenAI chat request (JSON) on stdin -> {"prompt": ..., "prompt_token_ids":
// [...]} on stdout, the prompt rill would serve for it. Kimi K3 checkpoints (model_type kimi_k3) go through
// the native XTML renderer, whose ids are encoded segment by segment; every other checkpoint through its own
// Jinja chat template, with ids from Tokenizer::encode(prompt, allow_special=true) as transformers does.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "text/chat/chat_template.h"
#include "text/k3/k3_renderer.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::cli {
namespace {

using Json = nlohmann::ordered_json;

struct Rendered {
  std::string prompt;
  std::vector<int32_t> ids;
};

// config.json's model_type, or that of its text_config (K3 nests the language model there).
bool is_kimi_k3(const std::filesystem::path& model_dir) {
  std::ifstream in(model_dir / "config.json");
  if (!in) return false;
  const Json config = Json::parse(in, nullptr, false);
  if (config.is_discarded() || !config.is_object()) return false;
  auto type_of = [](const Json& j) {
    auto it = j.find("model_type");
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto text = config.find("text_config");
  return type_of(config) == "kimi_k3" ||
         (text != config.end() && text->is_object() && type_of(*text) == "kimi_k3");
}

Result<Rendered> render_request(const std::filesystem::path& model_dir, const Json& request,
                                bool parse_tool_arguments) {
  RILL_ASSIGN_OR_RETURN(text::Tokenizer tokenizer, text::Tokenizer::load(model_dir));
  if (is_kimi_k3(model_dir)) {
    RILL_ASSIGN_OR_RETURN(text::k3::RenderedPrompt k3, text::k3::render_chat(request, tokenizer));
    return Rendered{std::move(k3.text), std::move(k3.ids)};
  }
  text::ChatTemplateOptions options;
  options.parse_tool_arguments = parse_tool_arguments;
  RILL_ASSIGN_OR_RETURN(text::ChatTemplate chat, text::ChatTemplate::load(model_dir, options));
  RILL_ASSIGN_OR_RETURN(std::string prompt, chat.render(request));
  std::vector<int32_t> ids = tokenizer.encode(prompt, /*allow_special=*/true);
  return Rendered{std::move(prompt), std::move(ids)};
}

}  // namespace

int run_render(int argc, char** argv) {
  CLI::App app{
      "OpenAI chat-completions request (JSON) on stdin -> {\"prompt\", \"prompt_token_ids\"} on stdout.",
      "rill render"};
  std::string model_dir;
  bool parse_tool_arguments = false;
  app.add_option("MODEL_DIR", model_dir,
                 "checkpoint directory: tokenizer files, config.json, and chat_template.jinja or "
                 "tokenizer_config.json's chat_template (Kimi K3 uses its native renderer instead)")
      ->required();
  app.add_flag("--parse-tool-arguments", parse_tool_arguments,
               "json-parse assistant tool_calls[].function.arguments before rendering, as vLLM does (by "
               "default the string the client sent is rendered as is)");
  if (const int rc = parse_args(app, argc, argv); rc >= 0) return rc;

  std::ios::sync_with_stdio(false);
  const std::string input(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>{});
  const Json request = Json::parse(input, nullptr, false);
  if (request.is_discarded()) return report_error("render", invalid_argument("stdin is not valid JSON"));
  auto rendered = render_request(model_dir, request, parse_tool_arguments);
  if (!rendered.ok()) return report_error("render", rendered.status());
  Json out;
  out["prompt"] = rendered->prompt;
  out["prompt_token_ids"] = rendered->ids;
  std::printf("%s\n", out.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace rill::cli
