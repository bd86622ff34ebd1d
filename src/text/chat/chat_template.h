// ChatTemplate: the Jinja chat template a checkpoint ships, rendering OpenAI chat requests into prompts the
// way transformers' apply_chat_template does behind vLLM. Kimi K3 ships no template; its prompts come from
// the native renderer in text/k3 instead.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "text/chat/chat_request.h"
#include "text/jinja/template.h"

namespace rill::text {

struct ChatTemplateOptions {
  bool parse_tool_arguments = false;  // see ChatNormalization
  jinja::RenderLimits limits;
  // A template file to use instead of the checkpoint's (vLLM's --chat-template); special tokens still come
  // from the checkpoint's tokenizer_config.json. Empty: the checkpoint's.
  std::filesystem::path template_file;
};

class ChatTemplate {
 public:
  // options.template_file if set, else MODEL_DIR/chat_template.jinja if present (it wins, as in
  // transformers), else tokenizer_config.json's `chat_template`: a string, or a list of {name, template}.
  // Special tokens come from tokenizer_config.json.
  static Result<ChatTemplate> load(const std::filesystem::path& model_dir, ChatTemplateOptions options = {});
  // One template from text (tests, overrides).
  static Result<ChatTemplate> from_source(std::string_view source, SpecialTokens tokens, std::string name,
                                          ChatTemplateOptions options = {});

  // The prompt for an OpenAI chat-completions request. With named templates, "tool_use" serves requests
  // that carry `tools` when the checkpoint has one, "default" the rest (transformers' choice).
  Result<std::string> render(const nlohmann::ordered_json& request) const;

  const SpecialTokens& special_tokens() const { return tokens_; }
  std::vector<std::string> template_names() const;

 private:
  struct Named {
    std::string name;
    jinja::Template tmpl;
    bool handles_content_parts;
  };
  ChatTemplate(std::vector<Named> templates, SpecialTokens tokens, ChatTemplateOptions options)
      : templates_(std::move(templates)), tokens_(std::move(tokens)), options_(std::move(options)) {}
  Result<const Named*> select(const nlohmann::ordered_json& request) const;
  static Result<Named> compile(std::string_view source, std::string name);

  std::vector<Named> templates_;
  SpecialTokens tokens_;
  ChatTemplateOptions options_;
};

}  // namespace rill::text
