// rill chat MODEL_DIR | --url URL: a terminal chat, on the engine (the same chat path as the server:
// server/chat_prompt, server/choice_decoder) or with a running server over HTTP (streamed SSE). Line
// editing and history come from libedit when stdin is a terminal; Ctrl-C stops the reply being written and
// keeps the conversation (the partial reply included); Ctrl-D or /exit quits; /help, /reset, /history.
#include <signal.h>
#include <unistd.h>

#include <editline/readline.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/parallel_flags.h"
#include "cli/http_client.h"
#include "engine/engine.h"
#include "model/config.h"
#include "server/chat_prompt.h"
#include "server/choice_decoder.h"
#include "text/chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::cli {
namespace {

using Json = nlohmann::ordered_json;

// Set by SIGINT; read by the reply loops (every 100 ms) and the prompt.
std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) {
  g_interrupted.store(true);
}

constexpr const char* kHelp =
    "  /help     this text\n"
    "  /reset    forget the conversation (the --system message stays)\n"
    "  /history  print the conversation\n"
    "  /exit     quit (also /quit, Ctrl-D)\n"
    "  Ctrl-C    stop the reply being written (the conversation is kept)\n";

struct ChatSettings {
  std::string system;
  float temperature = 0.6f, top_p = 0.95f;
  int max_tokens = 512;
  int64_t seed = -1;
  bool ignore_eos = false;
};

class Terminal {
 public:
  Terminal() : color_(isatty(fileno(stdout))) {}
  void reasoning(const std::string& s) { write(s, true); }
  void reasoning_end() { write("\n", true); }
  void content(const std::string& s) { write(s, false); }
  void tool_call(const std::string& name, const std::string& args) {
    if (!name.empty()) write("\n[tool call " + name + "] ", false);
    write(args, false);
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

// One assistant turn for the conversation so far: streams it to the terminal and returns the message to keep
// (after Ctrl-C: what was written until then).
class Replier {
 public:
  virtual ~Replier() = default;
  virtual Result<Json> reply(const Json& messages, Terminal& term) = 0;
};

class LocalReplier final : public Replier {
 public:
  LocalReplier(std::unique_ptr<engine::Engine> engine, std::unique_ptr<server::ChatPrompt> chat,
               std::shared_ptr<const text::Tokenizer> tokenizer, ChatSettings s)
      : engine_(std::move(engine)),
        chat_(std::move(chat)),
        tokenizer_(std::move(tokenizer)),
        s_(std::move(s)) {}
  ~LocalReplier() override { engine_->shutdown(false); }

  Result<Json> reply(const Json& messages, Terminal& term) override {
    Json body{{"messages", messages},
              {"max_tokens", s_.max_tokens},
              {"temperature", s_.temperature},
              {"top_p", s_.top_p}};
    if (s_.seed >= 0) body["seed"] = s_.seed;
    auto request = server::parse_chat_request(body, server::ParseLimits{tokenizer_->vocab_size()});
    if (!request.ok()) return invalid_argument("{}", request.error().message);
    auto prompt = chat_->render(*request);
    if (!prompt.ok()) return invalid_argument("{}", prompt.error().message);
    const int64_t context = engine_->max_model_len();
    if (int64_t(prompt->ids.size()) >= context)
      return invalid_argument("the conversation ({} tokens) fills the context ({}); /reset to start over",
                              prompt->ids.size(), context);
    engine::SamplingParams params = request->sampling.params;
    params.max_tokens = int32_t(std::min<int64_t>(s_.max_tokens, context - int64_t(prompt->ids.size())));
    params.ignore_eos = s_.ignore_eos;
    if (!s_.ignore_eos)
      for (const char* name : {"[EOS]", "[EOT]"})
        if (auto id = tokenizer_->token_id(name)) params.stop_token_ids.push_back(*id);
    std::unique_ptr<text::OutputParser> parser;
    if (!prompt->raw) {
      RILL_ASSIGN_OR_RETURN(parser, text::make_output_parser(prompt->parser));
    }
    server::ChoiceDecoder decoder(std::move(parser), prompt->parser.starts_in_reasoning);
    for (const auto& f : decoder.begin(prompt->forced_prefix)) print(f, term);
    RILL_ASSIGN_OR_RETURN(
        auto stream, engine_->submit(engine::Request{prompt->ids, params, prompt->reported_prompt_tokens}));
    engine::StreamEvent ev;
    bool cancelled = false;
    while (!decoder.finished()) {
      if (g_interrupted.load() && !cancelled) {
        engine_->cancel(stream->id());  // the finish event (cancelled) follows
        cancelled = true;
      }
      if (!stream->next(&ev, std::chrono::milliseconds(100))) continue;
      for (const auto& f : decoder.on_event(ev)) {
        print(f, term);
        if (!f.finish) continue;
        if (f.finish_reason == "error") return f.error;
        term.end(cancelled ? "interrupted" : f.finish_reason);
      }
    }
    const text::ParseResult& r = decoder.result();
    Json message{{"role", "assistant"}, {"content", r.content}};
    if (!r.reasoning.empty()) message["reasoning_content"] = r.reasoning;
    if (r.has_tool_calls()) {
      Json calls = Json::array();
      for (const auto& t : r.tool_calls)
        calls.push_back({{"id", t.id},
                         {"type", "function"},
                         {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
      message["tool_calls"] = std::move(calls);
    }
    return message;
  }

 private:
  static void print(const server::ChoiceFrame& f, Terminal& term) {
    using text::DeltaKind;
    if (f.finish) return;
    const text::OutputDelta& d = f.delta;
    if (d.kind == DeltaKind::Reasoning) return term.reasoning(d.text);
    if (d.kind == DeltaKind::ReasoningEnd) return term.reasoning_end();
    if (d.kind == DeltaKind::Content) return term.content(d.text);
    term.tool_call(d.tool_name, d.text);
  }

  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<server::ChatPrompt> chat_;
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  ChatSettings s_;
};

// The server's streamed chat completions (the same fields as the local path), read as they arrive.
class RemoteReplier final : public Replier {
 public:
  RemoteReplier(HttpUrl url, std::string model, std::string api_key, ChatSettings s)
      : url_(std::move(url)), model_(std::move(model)), api_key_(std::move(api_key)), s_(std::move(s)) {}

  Result<Json> reply(const Json& messages, Terminal& term) override {
    Json body{{"messages", messages},
              {"stream", true},
              {"max_tokens", s_.max_tokens},
              {"temperature", s_.temperature},
              {"top_p", s_.top_p}};
    if (!model_.empty()) body["model"] = model_;
    if (s_.seed >= 0) body["seed"] = s_.seed;
    if (s_.ignore_eos) body["ignore_eos"] = true;
    Json message{{"role", "assistant"}, {"content", ""}};
    std::string pending, reasoning, error, finish;
    Json calls = Json::array();
    bool in_reasoning = false, is_sse = false;
    std::string raw;  // a non-SSE body (an error)
    auto on_event = [&](const std::string& data) {
      if (data == "[DONE]") return;
      const Json ev = Json::parse(data, nullptr, false);
      if (!ev.is_object()) return;
      if (ev.contains("error")) {
        error = ev["error"].value("message", ev["error"].dump());
        return;
      }
      if (!ev.contains("choices") || ev["choices"].empty()) return;
      const Json& c = ev["choices"][0];
      const Json delta = c.value("delta", Json::object());
      if (delta.contains("reasoning_content") && delta["reasoning_content"].is_string()) {
        const std::string t = delta["reasoning_content"];
        reasoning += t;
        term.reasoning(t);
        in_reasoning = true;
      }
      if (delta.contains("content") && delta["content"].is_string()) {
        const std::string t = delta["content"];
        if (in_reasoning && !t.empty()) term.reasoning_end(), in_reasoning = false;
        message["content"] = message["content"].get<std::string>() + t;
        term.content(t);
      }
      if (delta.contains("tool_calls"))
        for (const Json& tc : delta["tool_calls"]) {
          const size_t i = tc.value("index", 0);
          while (calls.size() <= i)
            calls.push_back(
                {{"id", ""}, {"type", "function"}, {"function", {{"name", ""}, {"arguments", ""}}}});
          Json& call = calls[i];
          if (tc.contains("id") && tc["id"].is_string()) call["id"] = tc["id"];
          const Json fn = tc.value("function", Json::object());
          const std::string name =
              fn.contains("name") && fn["name"].is_string() ? fn["name"].get<std::string>() : "";
          const std::string args = fn.contains("arguments") && fn["arguments"].is_string()
                                       ? fn["arguments"].get<std::string>()
                                       : "";
          if (!name.empty()) call["function"]["name"] = name;
          call["function"]["arguments"] = call["function"]["arguments"].get<std::string>() + args;
          term.tool_call(name, args);
        }
      if (c.contains("finish_reason") && c["finish_reason"].is_string()) finish = c["finish_reason"];
    };
    auto on_body = [&](std::string_view piece) {
      pending.append(piece);
      for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
        std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.starts_with("data: ")) {
          is_sse = true;
          on_event(line.substr(6));
        } else if (!is_sse) {
          raw += line + "\n";
        }
      }
    };
    RILL_ASSIGN_OR_RETURN(HttpReply r, http_request(url_, "POST", "/v1/chat/completions", body.dump(),
                                                    api_key_, on_body, &g_interrupted));
    if (r.status != 200 && !r.stopped) {
      const Json err = Json::parse(raw + pending, nullptr, false);
      const std::string msg = err.is_object() && err.contains("error")
                                  ? err["error"].value("message", err.dump())
                                  : raw + pending;
      return invalid_argument("the server answered {}: {}", r.status, msg);
    }
    if (!error.empty()) return internal_error("the server: {}", error);
    term.end(r.stopped ? "interrupted" : finish.empty() ? "stop" : finish);
    if (!reasoning.empty()) message["reasoning_content"] = reasoning;
    if (!calls.empty()) message["tool_calls"] = std::move(calls);
    return message;
  }

 private:
  HttpUrl url_;
  std::string model_, api_key_;
  ChatSettings s_;
};

// Lines from libedit on a terminal (editing, history), else from stdin as they come.
class LineReader {
 public:
  LineReader() : tty_(isatty(fileno(stdin))) {
    if (tty_) using_history();
  }
  enum class Got { Line, Interrupted, End };
  Got read(std::string* line) {
    if (!tty_) return std::getline(std::cin, *line) ? Got::Line : Got::End;
    char* s = readline("> ");
    if (g_interrupted.exchange(false)) {  // Ctrl-C at the prompt: a fresh prompt, as a shell does
      std::free(s);
      std::fputs("\n", stdout);
      return Got::Interrupted;
    }
    if (!s) return Got::End;
    *line = s;
    std::free(s);
    if (!line->empty()) add_history(line->c_str());
    return Got::Line;
  }

 private:
  bool tty_;
};

void print_history(const Json& messages) {
  for (const Json& m : messages) {
    std::string text = m.value("content", Json("")).is_string() ? m["content"].get<std::string>() : "";
    if (m.contains("tool_calls")) text += " [" + std::to_string(m["tool_calls"].size()) + " tool call(s)]";
    std::printf("[%s] %s\n", m.value("role", "?").c_str(), text.c_str());
  }
  std::printf("(%zu message(s))\n", messages.size());
  std::fflush(stdout);
}

// The checks that need no weights: a K2-family checkpoint chats only with a chat template.
Status check_can_chat(const std::string& dir) {
  RILL_ASSIGN_OR_RETURN(auto config, model::ModelConfig::load(dir));
  if (config.family == model::ModelFamily::KimiK3) return {};  // the native renderer
  auto tmpl = text::ChatTemplate::load(dir);
  if (!tmpl.ok())
    return invalid_argument("this model cannot chat: {} (use `rill generate` for plain completions)",
                            tmpl.status().message());
  return {};
}

Result<std::unique_ptr<Replier>> open_local(const std::string& dir, const DeviceOptions& dev,
                                            const ParallelFlags& parallel, const engine::EngineOptions& eo,
                                            const ChatSettings& s) {
  RILL_TRY(check_can_chat(dir));
  RILL_ASSIGN_OR_RETURN(auto tokenizer, text::Tokenizer::load(dir));
  auto shared_tokenizer = std::make_shared<const text::Tokenizer>(std::move(tokenizer));
  RILL_ASSIGN_OR_RETURN(auto config, model::ModelConfig::load(dir));
  const bool k3 = config.family == model::ModelFamily::KimiK3;
  RILL_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> engine,
                        open_local_engine(dir, dev, parallel, shared_tokenizer, eo));
  auto chat = server::ChatPrompt::load(dir, k3, shared_tokenizer);
  return std::unique_ptr<Replier>(
      std::make_unique<LocalReplier>(std::move(engine), std::move(chat), shared_tokenizer, s));
}

Result<std::unique_ptr<Replier>> open_remote(const std::string& url_text, std::string model,
                                             const std::string& api_key, const ChatSettings& s) {
  RILL_ASSIGN_OR_RETURN(HttpUrl url, parse_http_url(url_text));
  RILL_ASSIGN_OR_RETURN(HttpReply models, http_request(url, "GET", "/v1/models", "", api_key));
  if (models.status != 200)
    return unavailable("--url {}: GET /v1/models answered {}: {}", url_text, models.status, models.body);
  if (model.empty()) {  // the server's first model
    const Json list = Json::parse(models.body, nullptr, false);
    if (list.is_object() && list.contains("data") && !list["data"].empty())
      model = list["data"][0].value("id", "");
  }
  return std::unique_ptr<Replier>(
      std::make_unique<RemoteReplier>(std::move(url), std::move(model), api_key, s));
}

}  // namespace

int run_chat(int argc, char** argv) {
  CLI::App app{
      "Interactive chat in the terminal, on a local model or (--url) a running `rill serve`: one message per "
      "line; /help, /reset, /history, /exit (or Ctrl-D); Ctrl-C stops a reply and keeps the conversation.",
      "rill chat"};
  std::string dir, url, model_name, api_key;
  ChatSettings s;
  engine::EngineOptions eo;
  eo.max_batch_size = 1;
  DeviceOptions dev;
  app.add_option("MODEL_DIR", dir, "Hugging Face checkpoint directory (not with --url)");
  app.add_option("--url", url, "chat with a running server instead: http://HOST:PORT");
  app.add_option("--model", model_name, "with --url: the model name to send (default: the server's first)");
  app.add_option("--api-key", api_key, "with --url: the server's --api-key");
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
  app.add_flag("--ignore-eos", s.ignore_eos, "keep writing past the end of the message, up to --max-tokens");
  app.add_option("--max-model-len", eo.max_model_len, "context length (0: the model's, capped by the cache)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxContextFlag));
  add_device_options(app, dev);
  ParallelFlags parallel;
  if (int rc = parse_with_parallel_flags(app, argc, argv, "chat", dev, parallel); rc >= 0) return rc;
  if (dir.empty() == url.empty())
    return report_error("chat", invalid_argument("give MODEL_DIR or --url (one of them)"));
  if (!url.empty() && parallel.ranks() > 1)
    return report_error("chat", invalid_argument("--tensor-parallel-size with --url: the server's flags decide "
                                                 "its ranks"));

  auto replier = url.empty() ? open_local(dir, dev, parallel, eo, s) : open_remote(url, model_name, api_key, s);
  if (!replier.ok()) return report_error("chat", replier.status());

  // No SA_RESTART: Ctrl-C interrupts the blocking read of the prompt or the socket, not just sets the flag.
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);

  Json messages = Json::array();
  if (!s.system.empty()) messages.push_back({{"role", "system"}, {"content", s.system}});
  const size_t base = messages.size();
  Terminal term;
  LineReader reader;
  std::string line;
  for (;;) {
    const LineReader::Got got = reader.read(&line);
    if (got == LineReader::Got::End) break;
    if (got == LineReader::Got::Interrupted) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/help") {
      std::fputs(kHelp, stdout);
      continue;
    }
    if (line == "/reset") {
      messages.erase(messages.begin() + std::ptrdiff_t(base), messages.end());
      std::puts("(conversation cleared)");
      continue;
    }
    if (line == "/history") {
      print_history(messages);
      continue;
    }
    if (line.starts_with("/")) {
      std::printf("unknown command %s\n%s", line.c_str(), kHelp);
      continue;
    }
    if (line.empty()) continue;
    g_interrupted.store(false);
    messages.push_back({{"role", "user"}, {"content", line}});
    auto message = (*replier)->reply(messages, term);
    g_interrupted.store(false);
    if (!message.ok()) {
      messages.erase(messages.end() - 1);
      std::fprintf(stderr, "rill chat: %s\n", message.status().message().c_str());
      continue;
    }
    messages.push_back(std::move(message).value());
  }
  return 0;
}

}  // namespace rill::cli
