// The chat path shared by the server and `rill chat`: an OpenAI chat request -> prompt ids, the count that
// usage reports, and the output parser's configuration. K2-family checkpoints (Kimi Linear, the tiny
// model) render with their Jinja chat template; kimi_k3 with the native XTML renderer (text/k3).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/openai/chat_request.h"
#include "text/chat/chat_template.h"
#include "text/constraint/grammar.h"
#include "text/constraint/token_constraint.h"
#include "text/constraint/token_mask.h"
#include "text/parsers/output_parser.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::server {

struct RenderedChat {
  std::string text;                    // the prompt text (with any forced prefix)
  std::vector<int32_t> ids;            // what the engine is given
  int32_t reported_prompt_tokens = 0;  // usage.prompt_tokens: K3 leaves out its 3-token generation stub
  text::ParserConfig parser;
  bool raw = false;           // no parser: the text is content (K2 family, tool_choice none, no reasoning)
  std::string forced_prefix;  // generated-side text the prompt ends with, fed to the parser first
  // The grammar every choice's output must follow (null: free): tool_choice "required" / named (text/k2,
  // text/k3 turn_grammar.h, from the turn's start: the forced prefix is its opening), K3 response_format,
  // K2-family response_format (the output is the JSON value).
  std::shared_ptr<const text::constraint::Grammar> grammar;
};

class ChatPrompt {
 public:
  // A K2-family checkpoint without a chat template still loads; chat requests then get a 400.
  // `template_file` (--chat-template) replaces the checkpoint's template.
  static std::unique_ptr<ChatPrompt> load(const std::filesystem::path& model_dir, bool kimi_k3,
                                          std::shared_ptr<const text::Tokenizer> tokenizer,
                                          const std::filesystem::path& template_file = {});

  // Errors are 400s naming the request field (template errors included, as vLLM reports them).
  //  - tool_choice "none": K2 templates do not see the tools and the output is not parsed for calls.
  //  - tool_choice "required" / named: the turn is grammar-constrained to calls of the declared tools (the
  //    named one: exactly one call), arguments valid for each tool's parameters schema (text/k2, text/k3
  //    turn_grammar.h); K2 family without a reasoning channel: the prompt also ends with the opening of the
  //    call (`<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>`
  //    for a named tool or the only one; the section opening alone for several), fed to the constraint too.
  ApiResult<RenderedChat> render(const ChatRequest& request) const;

  bool kimi_k3() const { return kimi_k3_; }
  // One choice's constraint for a rendered prompt with a grammar (null without one); `end_tokens` are the
  // request's stop ids, allowed once the grammar is complete.
  std::shared_ptr<text::constraint::TokenConstraint> constraint(const RenderedChat& prompt,
                                                                std::vector<int32_t> end_tokens) const;
  // The same for a grammar of the whole output (/v1/completions' structured outputs).
  std::shared_ptr<text::constraint::TokenConstraint> constraint(
      std::shared_ptr<const text::constraint::Grammar> grammar, std::vector<int32_t> end_tokens) const;

 private:
  ChatPrompt(bool kimi_k3, std::shared_ptr<const text::Tokenizer> tokenizer)
      : kimi_k3_(kimi_k3), tokenizer_(std::move(tokenizer)) {}
  ApiResult<RenderedChat> render_k2(const ChatRequest& request) const;
  ApiResult<RenderedChat> render_k3(const ChatRequest& request) const;
  std::string forced_tool_prefix(const ChatRequest& request) const;

  bool kimi_k3_;
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  std::shared_ptr<const text::constraint::TokenMasker> masker_;  // the vocabulary walk for grammars
  std::optional<text::ChatTemplate> template_;
  Status template_error_;
};

}  // namespace rill::server
