#include <cmath>

#include "engine/engine.h"

namespace rill::engine {

Status SamplingParams::validate(int32_t vocab_size) const {
  auto bad = [](const char* name, const std::string& why) { return invalid_argument("{}: {}", name, why); };
  if (!std::isfinite(temperature) || temperature < 0 || temperature > 100) return bad("temperature", "must be in [0, 100]");
  if (!(top_p > 0 && top_p <= 1)) return bad("top_p", "must be in (0, 1]");
  if (top_k < 0) return bad("top_k", "must be >= 0 (0: all tokens)");
  if (!(min_p >= 0 && min_p <= 1)) return bad("min_p", "must be in [0, 1]");
  if (!(presence_penalty >= -2 && presence_penalty <= 2)) return bad("presence_penalty", "must be in [-2, 2]");
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2)) return bad("frequency_penalty", "must be in [-2, 2]");
  if (!(repetition_penalty > 0 && repetition_penalty <= 10)) return bad("repetition_penalty", "must be in (0, 10]");
  if (max_tokens < 1) return bad("max_tokens", "must be at least 1");
  if (min_tokens < 0 || min_tokens > max_tokens) return bad("min_tokens", "must be in [0, max_tokens]");
  if (logprobs < -1 || logprobs > 20) return bad("logprobs", "must be in [0, 20]");
  for (int32_t id : stop_token_ids)
    if (id < 0 || id >= vocab_size) return bad("stop_token_ids", fmt::format("{} is outside the vocabulary", id));
  for (int32_t id : allowed_token_ids)
    if (id < 0 || id >= vocab_size)
      return bad("allowed_token_ids", fmt::format("{} is outside the vocabulary", id));
  for (const auto& s : stop)
    if (s.empty()) return bad("stop", "stop strings must not be empty");
  return {};
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "?";
}

bool RequestStream::next(StreamEvent* ev, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  *ev = std::move(events_.front());
  events_.pop_front();
  return true;
}

void RequestStream::push(StreamEvent ev) {
  std::function<void()> on_push;
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(ev));
    on_push = on_push_;
  }
  cv_.notify_all();
  if (on_push) on_push();
}

void RequestStream::set_on_push(std::function<void()> on_push) {
  bool pending;
  {
    std::lock_guard lock(mu_);
    on_push_ = on_push;
    pending = !events_.empty();
  }
  if (pending && on_push) on_push();
}

}  // namespace rill::engine
