// POST /v1/completions: prompts (text or ids) x n engine requests, raw text out, integer logprobs, echo;
// streamed as text_completion chunks or returned whole.
#include <chrono>

#include "server/openai/completion_request.h"
#include "server/openai/response.h"
#include "server/routes.h"
#include "server/structured_output.h"

namespace rill::server {
namespace {

using Clock = std::chrono::steady_clock;

// Per choice: its echo text and where its logprob offsets start.
struct CompletionChoiceState {
  std::string echo;
  int64_t offset = 0;
};

struct CompletionStream {
  std::shared_ptr<GenerationJob> job;
  const text::Tokenizer* tokenizer = nullptr;
  ResponseHeader header;
  bool logprobs = false, include_usage = false;
  int n = 1;
  std::vector<CompletionChoiceState> choices;
  Usage total;
  bool started = false;

  std::string chunk(int index, std::string_view text, std::string_view finish, const ChoiceFrame* f) {
    Json lp = nullptr;
    if (logprobs && f && !f->logprobs.empty()) {
      auto entries = logprob_entries(f->logprobs, *tokenizer);
      lp = completion_logprobs_json(entries, choices[size_t(index)].offset);
      for (const LogprobEntry& e : entries) choices[size_t(index)].offset += int64_t(e.token.size());
    }
    return sse_data(
        completion_chunk(header, completion_choice_json(index, text, finish, std::move(lp)), include_usage));
  }

  std::string pump(std::chrono::milliseconds timeout, bool* done) {
    std::string out;
    if (!started) {
      started = true;
      for (int i = 0; i < job->size(); ++i)
        if (!choices[size_t(i)].echo.empty()) out += chunk(i, choices[size_t(i)].echo, "", nullptr);
      if (!out.empty()) return out;
    }
    bool abort = false;
    for (JobFrame& jf : job->poll(timeout)) {
      const ChoiceFrame& f = jf.frame;
      if (!f.finish) {
        out += chunk(jf.choice, f.delta.text, "", &f);
        continue;
      }
      if (f.finish_reason == "error") {
        out += sse_data(error_body(error_from_status(f.error)));
        abort = true;
        break;
      }
      if (jf.choice % n == 0) {
        total.prompt_tokens += f.usage.prompt_tokens;
        total.cached_tokens += f.usage.cached_tokens;
      }
      total.completion_tokens += f.usage.completion_tokens;
      out += chunk(jf.choice, "", f.finish_reason, &f);
    }
    if (abort) job->cancel();
    if (abort || job->done()) {
      if (include_usage && !abort) out += sse_data(completion_usage_chunk(header, total));
      out += kSseDone;
      *done = true;
    }
    return out;
  }
};

std::optional<ApiError> respond_whole(GenerationJob& job, const CompletionRequest& request, int n,
                                      const std::vector<CompletionChoiceState>& states,
                                      const ResponseHeader& header, const text::Tokenizer& tokenizer,
                                      const HttpRequest& req, HttpResponse& res) {
  const int count = job.size();
  WholeJob whole;
  if (auto err = wait_whole(job, req, &whole)) return err;
  Usage total;
  for (int i = 0; i < count; ++i) {
    const Usage& u = whole.finished[size_t(i)].usage;
    if (i % n == 0) {  // the prompts' choices share their prompt
      total.prompt_tokens += u.prompt_tokens;
      total.cached_tokens += u.cached_tokens;
    }
    total.completion_tokens += u.completion_tokens;
  }
  Json choices = Json::array();
  for (int i = 0; i < count; ++i) {
    const std::string& echo = states[size_t(i)].echo;
    Json lp = nullptr;
    if (request.logprobs >= 0)
      lp = completion_logprobs_json(logprob_entries(whole.logprobs[size_t(i)], tokenizer), int64_t(echo.size()));
    choices.push_back(
        completion_choice_json(i, echo + job.decoder(i).result().content, whole.finished[size_t(i)].finish_reason,
                               std::move(lp)));
  }
  res.set_header("X-Msh-Usage-Prompt-Tokens", std::to_string(total.prompt_tokens));
  res.set_header("X-Msh-Usage-Cached-Tokens", std::to_string(total.cached_tokens));
  write_json(res, completion_json(header, std::move(choices), &total));
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> handle_completion(ServingContext& ctx, const HttpRequest& req, HttpResponse& res) {
  const auto arrival = Clock::now();
  RILL_API_ASSIGN_OR_RETURN(Json body, parse_body(req));
  apply_serving_defaults(ctx, &body);
  RILL_API_ASSIGN_OR_RETURN(CompletionRequest request, parse_completion_request(body, ctx.parse_limits()));
  RILL_API_TRY(check_model_name(ctx, request.model));
  add_serving_stop_ids(ctx, &request.sampling);
  // response_format, vLLM's structured_outputs and guided_*: the whole completion is the format (each choice
  // gets its own constraint: they are stateful).
  RILL_API_ASSIGN_OR_RETURN(StructuredOutputGrammar format, structured_output_grammar(body));
  const text::Tokenizer& tokenizer = ctx.tokenizer();

  // Every prompt is checked against the context before anything is submitted.
  std::vector<std::vector<int32_t>> prompts = std::move(request.prompt_ids);
  for (const std::string& text : request.prompt_texts)
    prompts.push_back(tokenizer.encode(text, /*allow_special=*/true));
  for (size_t p = 0; p < prompts.size(); ++p) {
    SamplingRequest fitted = request.sampling;
    const std::string param = prompts.size() == 1 ? "prompt" : fmt::format("prompt[{}]", p);
    RILL_API_TRY(
        fit_max_tokens(int64_t(prompts[p].size()), ctx.model_info().max_model_len, param.c_str(), &fitted));
  }
  const int n = request.sampling.n;
  auto job = std::make_shared<GenerationJob>(ctx, arrival);
  std::vector<CompletionChoiceState> states;
  int64_t reported_prompt_tokens = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    std::string echo;
    if (request.echo) {
      if (p < prompts.size() - request.prompt_texts.size()) {
        auto text = tokenizer.decode(prompts[p]);
        echo = text.ok() ? *text : "";
      } else {
        echo = request.prompt_texts[p - (prompts.size() - request.prompt_texts.size())];
      }
    }
    reported_prompt_tokens += int64_t(prompts[p].size());
    for (int j = 0; j < n; ++j) {
      states.push_back(CompletionChoiceState{echo, int64_t(echo.size())});
      ChoiceDecoder decoder(nullptr, false);
      engine::Request r{prompts[p], choice_params(request.sampling, j), -1,
                        ctx.chat().constraint(format.grammar, request.sampling.params.stop_token_ids)};
      RILL_API_TRY(job->submit(std::move(r), std::move(decoder)));
    }
  }
  ResponseHeader header{make_response_id("cmpl-"), unix_now(), response_model_name(ctx, request.model)};
  job->set_request_id(header.id, req.method, req.path, req.client);
  if (!request.sampling.stream) return respond_whole(*job, request, n, states, header, tokenizer, req, res);

  auto stream = std::make_shared<CompletionStream>();
  stream->job = job;
  stream->tokenizer = &tokenizer;
  stream->header = std::move(header);
  stream->logprobs = request.logprobs >= 0;
  stream->include_usage = request.sampling.include_usage;
  stream->n = n;
  stream->choices = std::move(states);
  res.set_header("X-Msh-Usage-Prompt-Tokens", std::to_string(reported_prompt_tokens));
  stream_sse(res, job,
             [stream](std::chrono::milliseconds timeout, bool* done) { return stream->pump(timeout, done); });
  return std::nullopt;
}

}  // namespace rill::server
