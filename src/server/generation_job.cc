#include "server/generation_job.h"

#include "server/request_log.h"

namespace rill::server {

GenerationJob::~GenerationJob() {
  cancel();
}

void GenerationJob::cancel() {
  engine::Engine* engine = ctx_.engine_if_loaded();
  const double now = std::chrono::duration<double>(Clock::now() - arrival_).count();
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    if (c.decoder.finished() || c.cancelled) continue;
    c.cancelled = true;
    if (engine) engine->cancel(c.stream->id());
    // vLLM counts an abort with what it had: its prompt and the tokens generated until now.
    ctx_.metrics().record_request(RequestRecord{.finish_reason = "abort",
                                                .e2e_latency = now,
                                                .time_to_first_token = c.first_token_s,
                                                .last_token = c.last_token_s,
                                                .prompt_tokens = c.prompt_tokens,
                                                .completion_tokens = c.tokens_received});
    if (ctx_.config().log_requests)
      log_finished_request(FinishedRequest{request_id_, int(i), 499, "abort", c.prompt_tokens, -1,
                                           c.tokens_received, c.first_token_s, now, method_, path_, client_});
  }
}

void GenerationJob::wake_on_event(const std::function<void()>& wake) {
  for (Choice& c : choices_) c.stream->set_on_push(wake);
}

std::optional<ApiError> GenerationJob::submit(engine::Request request, ChoiceDecoder decoder) {
  const int64_t prompt_tokens =
      request.reported_prompt_tokens >= 0 ? request.reported_prompt_tokens : int64_t(request.prompt.size());
  auto stream = ctx_.engine().submit(std::move(request));
  if (!stream.ok()) return error_from_status(stream.status());
  choices_.push_back(Choice{std::move(stream).value(), std::move(decoder), prompt_tokens});
  return std::nullopt;
}

void GenerationJob::take(int i, const engine::StreamEvent& ev, std::vector<JobFrame>* out) {
  Choice& c = choices_[size_t(i)];
  const double now = std::chrono::duration<double>(Clock::now() - arrival_).count();
  if (!ev.token_ids.empty() && !c.cancelled) {
    if (c.first_token_s < 0)
      c.first_token_s = now;
    else  // vLLM: one inter-token latency per output event, however many tokens it carries
      ctx_.metrics().record_inter_token_latency(now - c.last_token_s);
    c.last_token_s = now;
    c.tokens_received += int64_t(ev.token_ids.size());
  }
  for (ChoiceFrame& f : c.decoder.on_event(ev)) {
    if (f.finish) {
      ++n_finished_;
      if (!c.cancelled) {  // already counted as an abort
        ctx_.metrics().record_request(RequestRecord{.finish_reason = f.finish_reason,
                                                    .e2e_latency = now,
                                                    .time_to_first_token = c.first_token_s,
                                                    .last_token = c.last_token_s,
                                                    .prompt_tokens = f.usage.prompt_tokens,
                                                    .completion_tokens = f.usage.completion_tokens,
                                                    .queue_seconds = ev.queue_seconds,
                                                    .prefill_seconds = ev.prefill_seconds});
        if (ctx_.config().log_requests) {
          const int status = f.finish_reason == "error"                ? 500
                             : f.finish_reason == "server_interrupted" ? 503
                                                                       : 200;
          log_finished_request(FinishedRequest{request_id_, i, status, f.finish_reason, f.usage.prompt_tokens,
                                               f.usage.cached_tokens, f.usage.completion_tokens,
                                               c.first_token_s, now, method_, path_, client_});
        }
      }
    }
    out->push_back(JobFrame{i, std::move(f)});
  }
}

std::vector<JobFrame> GenerationJob::poll(std::chrono::milliseconds timeout) {
  std::vector<JobFrame> out;
  const int n = size();
  if (done()) return out;
  if (ctx_.phase() == Phase::Stopped) {  // the engine is gone: nothing more will arrive
    for (int i = 0; i < n; ++i) {
      if (choices_[size_t(i)].decoder.finished()) continue;
      engine::StreamEvent ev;
      ev.finish = engine::FinishReason::Cancelled;
      take(i, ev, &out);
    }
    return out;
  }
  engine::StreamEvent ev;
  // Drain what is ready on every stream without waiting, round robin so no choice starves.
  for (int k = 0; k < n; ++k) {
    const int i = int((next_ + size_t(k)) % size_t(n));
    Choice& c = choices_[size_t(i)];
    while (!c.decoder.finished() && c.stream->next(&ev, std::chrono::milliseconds(0))) take(i, ev, &out);
  }
  next_ = (next_ + 1) % size_t(n);
  if (!out.empty() || done()) return out;
  // Nothing ready: wait on one unfinished stream (n == 1: the whole timeout; n > 1: a short slice).
  for (int i = 0; i < n; ++i) {
    Choice& c = choices_[size_t(i)];
    if (c.decoder.finished()) continue;
    const auto wait = n == 1 ? timeout : std::min(timeout, std::chrono::milliseconds(2));
    if (c.stream->next(&ev, wait)) take(i, ev, &out);
    break;
  }
  return out;
}

}  // namespace rill::server
