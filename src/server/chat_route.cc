// POST /v1/chat/completions: parse -> render -> fit the context -> submit n engine requests -> stream SSE
// chunks (serving.md §1.3) or collect one chat.completion.
#include <chrono>

#include "server/openai/chat_request.h"
#include "server/openai/response.h"
#include "server/routes.h"

namespace rill::server {

// With ignore_eos the end of the message does not end the output: the parser passes what follows through.
text::ParserConfig chat_parser_config(const RenderedChat& prompt, const ChatRequest& request) {
  text::ParserConfig config = prompt.parser;
  config.stop_at_end_of_message = !request.sampling.params.ignore_eos;
  return config;
}

ChoiceDecoder make_chat_decoder(const RenderedChat& prompt, const ChatRequest& request) {
  std::unique_ptr<text::OutputParser> parser;
  if (!prompt.raw) {
    auto made = text::make_output_parser(chat_parser_config(prompt, request));
    if (made.ok()) parser = std::move(made).value();
  }
  return ChoiceDecoder(std::move(parser), prompt.parser.starts_in_reasoning);
}

namespace {

using Clock = std::chrono::steady_clock;

// The SSE side of one streamed chat request.
struct ChatStream {
  std::shared_ptr<GenerationJob> job;
  const text::Tokenizer* tokenizer = nullptr;
  ResponseHeader header;
  bool logprobs = false, include_usage = false, kimi_k3 = false;
  std::vector<std::vector<ChoiceFrame>> opening;  // per choice: frames of the forced prefix
  Usage total;
  bool started = false;

  Json logprobs_json(const ChoiceFrame& f) const {
    if (!logprobs || f.logprobs.empty()) return nullptr;
    return chat_logprobs_json(logprob_entries(f.logprobs, *tokenizer));
  }

  std::string frame(int index, const ChoiceFrame& f) const {
    return sse_data(chat_chunk(
        header, chat_chunk_choice(index, chat_delta_json(f.delta), "", logprobs_json(f)), include_usage));
  }

  // The end frame (stream spec: delta {}, finish_reason; usage only in the usage chunk, as OpenAI), or vLLM's
  // error frame for an engine failure (K3 never gets an error-only frame: it ends with finish_reason
  // "unexpected_state").
  std::string finish(int index, const ChoiceFrame& f, bool* abort) {
    if (f.finish_reason == "error" && !kimi_k3) {
      *abort = true;
      return sse_data(error_body(error_from_status(f.error)));
    }
    const std::string reason = f.finish_reason == "error" ? "unexpected_state" : f.finish_reason;
    if (index == 0) {
      total.prompt_tokens = f.usage.prompt_tokens;
      total.cached_tokens = f.usage.cached_tokens;
    }
    total.completion_tokens += f.usage.completion_tokens;
    total.reasoning_tokens += f.usage.reasoning_tokens;
    return sse_data(chat_chunk(header, chat_chunk_choice(index, Json::object(), reason, logprobs_json(f)),
                               include_usage));
  }

  std::string pump(std::chrono::milliseconds timeout, bool* done) {
    std::string out;
    if (!started) {
      started = true;
      for (int i = 0; i < job->size(); ++i) {
        Json role{{"role", "assistant"}, {"content", ""}};
        out += sse_data(chat_chunk(header, chat_chunk_choice(i, std::move(role), ""), include_usage));
        for (const ChoiceFrame& f : opening[size_t(i)]) out += frame(i, f);
      }
      return out;
    }
    bool abort = false;
    for (JobFrame& jf : job->poll(timeout)) {
      out += jf.frame.finish ? finish(jf.choice, jf.frame, &abort) : frame(jf.choice, jf.frame);
      if (abort) break;
    }
    if (abort) job->cancel();
    if (abort || job->done()) {
      if (include_usage && !abort) out += sse_data(chat_usage_chunk(header, total));
      out += kSseDone;
      *done = true;
    }
    return out;
  }
};

std::optional<ApiError> respond_whole(GenerationJob& job, const ChatRequest& request,
                                      const ResponseHeader& header, const text::Tokenizer& tokenizer,
                                      const HttpRequest& req, HttpResponse& res) {
  const int n = job.size();
  WholeJob whole;
  if (auto err = wait_whole(job, req, &whole)) return err;
  std::vector<ChatChoice> choices(static_cast<size_t>(n));
  Usage total;
  for (int i = 0; i < n; ++i) {
    const ChoiceFrame& f = whole.finished[size_t(i)];
    if (i == 0) {  // the choices share the prompt
      total.prompt_tokens = f.usage.prompt_tokens;
      total.cached_tokens = f.usage.cached_tokens;
    }
    total.completion_tokens += f.usage.completion_tokens;
    total.reasoning_tokens += f.usage.reasoning_tokens;
    ChatChoice& c = choices[size_t(i)];
    c.finish_reason = f.finish_reason;
    c.index = i;
    c.parsed = job.decoder(i).result();
    if (request.logprobs) c.logprobs = chat_logprobs_json(logprob_entries(whole.logprobs[size_t(i)], tokenizer));
  }
  res.set_header("X-Msh-Usage-Prompt-Tokens", std::to_string(total.prompt_tokens));
  res.set_header("X-Msh-Usage-Cached-Tokens", std::to_string(total.cached_tokens));
  write_json(res, chat_completion_json(header, choices, total));
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> handle_chat(ServingContext& ctx, const HttpRequest& req, HttpResponse& res) {
  const auto arrival = Clock::now();
  RILL_API_ASSIGN_OR_RETURN(Json body, parse_body(req));
  apply_serving_defaults(ctx, &body);
  RILL_API_ASSIGN_OR_RETURN(ChatRequest request, parse_chat_request(body, ctx.parse_limits()));
  RILL_API_TRY(check_model_name(ctx, request.model));
  add_serving_stop_ids(ctx, &request.sampling);
  RILL_API_ASSIGN_OR_RETURN(RenderedChat prompt, ctx.chat().render(request));
  RILL_API_TRY(fit_max_tokens(int64_t(prompt.ids.size()), ctx.model_info().max_model_len, "messages",
                              &request.sampling, ctx.model_info().default_max_tokens));
  if (!prompt.raw && !text::make_output_parser(chat_parser_config(prompt, request)).ok())
    return ApiError{500, "internal error: the output parser rejected its configuration"};

  auto job = std::make_shared<GenerationJob>(ctx, arrival);
  auto stream = std::make_shared<ChatStream>();
  for (int i = 0; i < request.sampling.n; ++i) {
    ChoiceDecoder decoder = make_chat_decoder(prompt, request);
    stream->opening.push_back(decoder.begin(prompt.forced_prefix));
    engine::Request r{prompt.ids, choice_params(request.sampling, i), prompt.reported_prompt_tokens,
                      ctx.chat().constraint(prompt, request.sampling.params.stop_token_ids)};
    RILL_API_TRY(job->submit(std::move(r), std::move(decoder)));
  }
  ResponseHeader header{make_response_id("chatcmpl-"), unix_now(), response_model_name(ctx, request.model)};
  job->set_request_id(header.id, req.method, req.path, req.client);
  if (!request.sampling.stream) return respond_whole(*job, request, header, ctx.tokenizer(), req, res);

  stream->job = job;
  stream->tokenizer = &ctx.tokenizer();
  stream->header = std::move(header);
  stream->logprobs = request.logprobs;
  // OpenAI's rule for every model (not Moonshot's usage without opt-in on K3, serving.md §2.6).
  stream->include_usage = request.sampling.include_usage;
  stream->kimi_k3 = ctx.model_info().kimi_k3;
  res.set_header("X-Msh-Usage-Prompt-Tokens", std::to_string(prompt.reported_prompt_tokens));
  stream_sse(res, job,
             [stream](std::chrono::milliseconds timeout, bool* done) { return stream->pump(timeout, done); });
  return std::nullopt;
}

}  // namespace rill::server
