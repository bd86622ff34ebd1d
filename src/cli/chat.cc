// rill chat MODEL_DIR: a terminal chat on the engine API, rendered and parsed by the same chat path as the
// server (server/chat_prompt, server/choice_decoder). Reads one user message per line from stdin, streams
// the reply (reasoning dimmed on a terminal), keeps the conversation. /reset clears it, /exit quits.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "engine/engine.h"
#include "server/chat_prompt.h"
#include "server/choice_decoder.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::cli {
namespace {

using Json = nlohmann::ordered_json;

struct ChatSettings {
  std::string system;
  float temperature = 0.6f, top_p = 0.95f;
  int max_tokens = 512;
  int64_t seed = -1;
};

class Terminal {
 public:
  Terminal() : color_(isatty(fileno(stdout))) {}
  void print(const server::ChoiceFrame& f) {
    using text::DeltaKind;
    if (f.finish) return;
    const text::OutputDelta& d = f.delta;
    if (d.kind == DeltaKind::Reasoning) return write(d.text, true);
    if (d.kind == DeltaKind::ReasoningEnd) return write("\n", true);
    if (d.kind == DeltaKind::Content) return write(d.text, false);
    if (!d.tool_name.empty()) write("\n[tool call " + d.tool_name + "] ", false);
    write(d.text, false);
  }
  void end(const std::string& reason) {
    write(reason == "stop" || reason == "tool_calls" ? "\n" : "\n[" + reason + "]\n", false);
  }

 private:
  void write(const std::string& s, bool dim) {
    if (s.empty()) return;
    if (dim && color_) std::fputs("\x1b[2m", stdout);
    std::fputs(s.c_str(), stdout);
    if (dim && color_) std::fputs("\x1b[0m", stdout);
    std::fflush(stdout);
  }
  bool color_;
};

// One assistant turn: render, submit, stream, and return the message to keep in the history.
Result<Json> reply(engine::Engine& engine, const server::ChatPrompt& chat, const text::Tokenizer& tokenizer,
                   const Json& messages, const ChatSettings& s, Terminal& term) {
  Json body{{"messages", messages},
            {"max_tokens", s.max_tokens},
            {"temperature", s.temperature},
            {"top_p", s.top_p}};
  if (s.seed >= 0) body["seed"] = s.seed;
  auto request = server::parse_chat_request(body, server::ParseLimits{tokenizer.vocab_size()});
  if (!request.ok()) return invalid_argument("{}", request.error().message);
  auto prompt = chat.render(*request);
  if (!prompt.ok()) return invalid_argument("{}", prompt.error().message);
  if (int64_t(prompt->ids.size()) >= engine.max_model_len())
    return invalid_argument("the conversation ({} tokens) fills the context ({}); /reset to start over",
                            prompt->ids.size(), engine.max_model_len());
  engine::SamplingParams params = request->sampling.params;
  params.max_tokens =
      int32_t(std::min<int64_t>(s.max_tokens, engine.max_model_len() - int64_t(prompt->ids.size())));
  for (const char* name : {"[EOS]", "[EOT]"})
    if (auto id = tokenizer.token_id(name)) params.stop_token_ids.push_back(*id);
  std::unique_ptr<text::OutputParser> parser;
  if (!prompt->raw) {
    RILL_ASSIGN_OR_RETURN(parser, text::make_output_parser(prompt->parser));
  }
  server::ChoiceDecoder decoder(std::move(parser), prompt->parser.starts_in_reasoning);
  for (const auto& f : decoder.begin(prompt->forced_prefix)) term.print(f);
  RILL_ASSIGN_OR_RETURN(auto stream,
                        engine.submit(engine::Request{prompt->ids, params, prompt->reported_prompt_tokens}));
  engine::StreamEvent ev;
  while (!decoder.finished()) {
    if (!stream->next(&ev, std::chrono::milliseconds(100))) continue;
    for (const auto& f : decoder.on_event(ev)) {
      term.print(f);
      if (!f.finish) continue;
      if (f.finish_reason == "error") return f.error;
      term.end(f.finish_reason);
    }
  }
  const text::ParseResult& r = decoder.result();
  Json message{{"role", "assistant"}, {"content", r.content}};
  if (!r.reasoning.empty()) message["reasoning_content"] = r.reasoning;
  if (r.has_tool_calls()) {
    Json calls = Json::array();
    for (const auto& t : r.tool_calls)
      calls.push_back(
          {{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
    message["tool_calls"] = std::move(calls);
  }
  return message;
}

}  // namespace

int run_chat(int argc, char** argv) {
  CLI::App app{"Interactive chat in the terminal: one message per line on stdin; /reset, /exit.",
               "rill chat"};
  std::string dir;
  ChatSettings s;
  engine::EngineOptions eo;
  eo.max_batch_size = 1;
  DeviceOptions dev;
  app.add_option("MODEL_DIR", dir, "Hugging Face checkpoint directory")->required();
  app.add_option("--system", s.system, "system message that starts the conversation");
  app.add_option("--temperature", s.temperature, "sampling temperature (0: greedy)")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 2.0f));
  app.add_option("--top-p", s.top_p, "nucleus sampling mass")
      ->capture_default_str()
      ->check(CLI::Range(0.01f, 1.0f));
  app.add_option("--max-tokens", s.max_tokens, "tokens per reply at most")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxContextFlag));
  app.add_option("--seed", s.seed, "sampling seed (-1: random)")->capture_default_str();
  app.add_option("--max-model-len", eo.max_model_len, "context length (0: the model's, capped by the cache)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxContextFlag));
  add_device_options(app, dev);
  if (int rc = parse_args(app, argc, argv); rc >= 0) return rc;

  auto tokenizer = text::Tokenizer::load(dir);
  if (!tokenizer.ok()) return report_error("chat", tokenizer.status());
  auto shared_tokenizer = std::make_shared<const text::Tokenizer>(std::move(tokenizer).value());
  auto be = open_backend(dev);
  if (!be.ok()) return report_error("chat", be.status());
  auto m = load_model_with_progress(dir, **be);
  if (!m.ok()) return report_error("chat", m.status());
  const bool k3 = (*m)->config().family == model::ModelFamily::KimiK3;
  auto engine = engine::Engine::create(std::move(m).value(), shared_tokenizer, eo);
  if (!engine.ok()) return report_error("chat", engine.status());
  auto chat = server::ChatPrompt::load(dir, k3, shared_tokenizer);

  Json messages = Json::array();
  if (!s.system.empty()) messages.push_back({{"role", "system"}, {"content", s.system}});
  const size_t base = messages.size();
  const bool tty = isatty(fileno(stdin));
  Terminal term;
  std::string line;
  for (;;) {
    if (tty) std::fputs("> ", stdout), std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages.erase(messages.begin() + std::ptrdiff_t(base), messages.end());
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    auto message = reply(**engine, *chat, *shared_tokenizer, messages, s, term);
    if (!message.ok()) {
      messages.erase(messages.end() - 1);
      std::fprintf(stderr, "rill chat: %s\n", message.status().message().c_str());
      continue;
    }
    messages.push_back(std::move(message).value());
  }
  (*engine)->shutdown(false);
  return 0;
}

}  // namespace rill::cli
