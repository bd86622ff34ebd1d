#include "server/chat_prompt.h"

#include "server/content_spans.h"
#include "server/structured_output.h"

#include "text/constraint/grammar_constraint.h"
#include "text/constraint/json_schema.h"
#include "text/k2/turn_grammar.h"
#include "text/k3/k3_renderer.h"
#include "text/k3/turn_grammar.h"

namespace rill::server {

std::unique_ptr<ChatPrompt> ChatPrompt::load(const std::filesystem::path& model_dir, bool kimi_k3,
                                             std::shared_ptr<const text::Tokenizer> tokenizer,
                                             const std::filesystem::path& template_file) {
  std::unique_ptr<ChatPrompt> chat(new ChatPrompt(kimi_k3, std::move(tokenizer)));
  chat->masker_ = std::make_shared<const text::constraint::TokenMasker>(*chat->tokenizer_);
  if (!kimi_k3) {
    text::ChatTemplateOptions options;
    options.template_file = template_file;
    auto tmpl = text::ChatTemplate::load(model_dir, std::move(options));
    if (tmpl.ok())
      chat->template_.emplace(std::move(tmpl).value());
    else
      chat->template_error_ = tmpl.status();
  }
  return chat;
}

std::shared_ptr<text::constraint::TokenConstraint> ChatPrompt::constraint(const RenderedChat& prompt,
                                                                          std::vector<int32_t> end_tokens) const {
  if (!prompt.grammar || !masker_) return nullptr;
  auto c =
      std::make_shared<text::constraint::GrammarConstraint>(prompt.grammar, masker_, std::move(end_tokens));
  // The grammar describes the whole turn; the forced prefix is its opening, already written into the prompt.
  for (int32_t id : tokenizer_->encode(prompt.forced_prefix, /*allow_special=*/true)) c->accept(id);
  return c;
}

std::shared_ptr<text::constraint::TokenConstraint> ChatPrompt::constraint(
    std::shared_ptr<const text::constraint::Grammar> grammar, std::vector<int32_t> end_tokens) const {
  if (!grammar || !masker_) return nullptr;
  return std::make_shared<text::constraint::GrammarConstraint>(std::move(grammar), masker_, std::move(end_tokens));
}

ApiResult<RenderedChat> ChatPrompt::render(const ChatRequest& request) const {
  return kimi_k3_ ? render_k3(request) : render_k2(request);
}

std::string ChatPrompt::forced_tool_prefix(const ChatRequest& request) const {
  const char* kMarkers[] = {"<|tool_calls_section_begin|>", "<|tool_call_begin|>",
                            "<|tool_call_argument_begin|>"};
  for (const char* m : kMarkers)
    if (!tokenizer_->token_id(m)) return "";  // not the Kimi control vocabulary: nothing to force with
  std::string name = request.tool_choice_name;
  if (request.tool_choice == ToolChoice::Required && request.n_tools == 1)
    name = request.body["tools"][0]["function"]["name"].get<std::string>();
  if (request.tool_choice == ToolChoice::Required && name.empty()) return "<|tool_calls_section_begin|>";
  if (name.empty()) return "";
  return fmt::format(
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.{}:{}<|tool_call_argument_begin|>", name,
      request.n_prior_tool_calls);
}

ApiResult<RenderedChat> ChatPrompt::render_k2(const ChatRequest& request) const {
  if (!template_) return bad_request("messages", "this model cannot chat: {}", template_error_.message());
  Json body = request.body;
  if (request.tool_choice == ToolChoice::None) body.erase("tools");
  Json marked = body;
  const ContentSpans content(&marked);
  auto prompt = template_->render(content.size() ? marked : body);
  if (!prompt.ok()) return error_from_status(prompt.status(), "messages");
  std::optional<std::vector<ContentSpans::Span>> spans;
  if (content.size()) {
    spans = content.split(*prompt);
    if (spans) {
      prompt->clear();
      for (const ContentSpans::Span& s : *spans) *prompt += s.text;
    } else {  // the template transformed some content: render as it was, control tokens and all
      prompt = template_->render(body);
      if (!prompt.ok()) return error_from_status(prompt.status(), "messages");
    }
  }
  RenderedChat out;
  out.parser.family = text::ModelFamily::KimiK2;
  out.parser.k2_reasoning = tokenizer_->token_id("<think>").has_value();
  std::string_view tail = *prompt;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.remove_suffix(1);
  out.parser.starts_in_reasoning = out.parser.k2_reasoning && tail.ends_with("<think>");
  out.parser.first_tool_call_number = request.n_prior_tool_calls;
  out.raw = request.tool_choice == ToolChoice::None && !out.parser.k2_reasoning;
  // A forced call: the grammar holds the turn to calls of the declared (or named) tools. When no reasoning
  // comes first, the prompt already opens the call (prefill instead of forced decode steps).
  const bool forced = request.tool_choice == ToolChoice::Required || request.tool_choice == ToolChoice::Named;
  if (forced) {
    text::k2::ToolGrammarOptions go;
    go.reasoning = out.parser.starts_in_reasoning;
    go.parallel_tool_calls = request.body.value("parallel_tool_calls", Json(true)) != Json(false);
    go.first_call_index = request.n_prior_tool_calls;
    go.named_tool = request.tool_choice == ToolChoice::Named ? request.tool_choice_name : "";
    auto grammar = text::k2::required_tool_call_grammar(request.body, *tokenizer_, go);
    if (!grammar.ok()) return bad_request("tools", "{}", grammar.status().message());
    out.grammar = *grammar;
    if (!go.reasoning) out.forced_prefix = forced_tool_prefix(request);
  }
  out.text = *prompt + out.forced_prefix;
  if (spans) {
    for (const ContentSpans::Span& s : *spans) {
      const std::vector<int32_t> ids = tokenizer_->encode(s.text, /*allow_special=*/!s.content);
      out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    }
    const std::vector<int32_t> prefix = tokenizer_->encode(out.forced_prefix, /*allow_special=*/true);
    out.ids.insert(out.ids.end(), prefix.begin(), prefix.end());
  } else {
    out.ids = tokenizer_->encode(out.text, /*allow_special=*/true);
  }
  out.reported_prompt_tokens = int32_t(out.ids.size());
  // response_format: the whole output is the JSON value, unless a reasoning channel comes first (K2 thinking
  // templates; not constrained) or a call is forced.
  // vLLM's structured_outputs / guided_json / guided_regex / guided_choice the same way (structured_output.h).
  RILL_API_ASSIGN_OR_RETURN(StructuredOutputGrammar format, structured_output_grammar(request.body));
  if (format.grammar && !out.parser.starts_in_reasoning && !forced) out.grammar = format.grammar;
  return out;
}

ApiResult<RenderedChat> ChatPrompt::render_k3(const ChatRequest& request) const {
  // K3's response_format constrains the response channel (its renderer's grammar); vLLM's other format fields
  // would need the same channel structure around them, which is not built: refused, not ignored.
  RILL_API_ASSIGN_OR_RETURN(StructuredOutputGrammar format, structured_output_grammar(request.body));
  if (format.grammar && format.field != "response_format")
    return bad_request(format.field, "{}: not supported on Kimi K3 yet (use response_format)", format.field);
  auto rendered = text::k3::render_chat(request.body, *tokenizer_);
  if (!rendered.ok()) return error_from_status(rendered.status());
  RenderedChat out;
  out.text = std::move(rendered->text);
  out.ids = std::move(rendered->ids);
  out.reported_prompt_tokens = int32_t(out.ids.size()) - rendered->n_generation_stub;
  out.parser.family = text::ModelFamily::KimiK3;
  out.parser.starts_in_reasoning = rendered->options.thinking && rendered->options.add_generation_prompt;
  out.parser.first_tool_call_number = request.n_prior_tool_calls;
  const text::k3::ChatOptions& o = rendered->options;
  out.parser.tool_calls = o.tool_choice != text::k3::ToolChoice::None;
  const bool forced =
      o.tool_choice == text::k3::ToolChoice::Required || o.tool_choice == text::k3::ToolChoice::Named;
  if (forced && o.add_generation_prompt) {
    text::k3::ToolGrammarOptions go;
    go.thinking = o.thinking;
    go.parallel_tool_calls = request.body.value("parallel_tool_calls", Json(true)) != Json(false);
    go.named_tool = o.tool_choice_name;
    auto grammar = text::k3::required_tool_call_grammar(request.body, *tokenizer_, go);
    if (!grammar.ok()) return bad_request("tools", "{}", grammar.status().message());
    out.grammar = *grammar;
  } else if (o.response_format != text::k3::ResponseFormat::Text && o.add_generation_prompt) {
    const bool schema = o.response_format == text::k3::ResponseFormat::JsonSchema;
    auto grammar = text::k3::response_format_grammar(schema ? &o.response_schema : nullptr, *tokenizer_, o.thinking);
    if (!grammar.ok()) return bad_request("response_format", "{}", grammar.status().message());
    out.grammar = *grammar;
  }
  return out;
}

}  // namespace rill::server
