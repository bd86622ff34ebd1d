#include "server/serving_context.h"

#include <fmt/format.h>

#include <algorithm>

namespace rill::server {

bool ServingConfig::serves(const std::string& model) const {
  if (served_model_names.empty()) return model == served_model_name;
  return std::find(served_model_names.begin(), served_model_names.end(), model) != served_model_names.end();
}

ServingContext::ServingContext(ServingConfig config)
    : config_(std::move(config)), metrics_(config_.served_model_name) {}

std::string ServingContext::unavailable_message() const {
  switch (phase()) {
    case Phase::Loading: {
      const int64_t done = load_done_.load(), total = load_total_.load();
      if (total <= 0) return "Loading model";
      return fmt::format("Loading model: {}% ({:.2f} / {:.2f} GB of weights)", 100 * done / total,
                         double(done) / 1e9, double(total) / 1e9);
    }
    case Phase::Ready:
      return "";
    case Phase::Draining:
    case Phase::Stopped:
      return "Server is shutting down";
    case Phase::Failed: {
      std::lock_guard<std::mutex> lock(mu_);
      return "Model failed to load: " + message_;
    }
  }
  return "Unavailable";
}

void ServingContext::set_load_progress(int64_t done, int64_t total) {
  load_total_.store(total);
  load_done_.store(done);
}

void ServingContext::set_ready(std::unique_ptr<engine::Engine> engine,
                               std::shared_ptr<const text::Tokenizer> tokenizer,
                               std::unique_ptr<ChatPrompt> chat, ModelInfo info) {
  engine_ = std::move(engine);
  tokenizer_ = std::move(tokenizer);
  chat_ = std::move(chat);
  info_ = std::move(info);
  loaded_engine_.store(engine_.get(), std::memory_order_release);
  Phase expected = Phase::Loading;  // a shutdown that began during loading keeps its phase
  phase_.compare_exchange_strong(expected, Phase::Ready, std::memory_order_acq_rel);
}

void ServingContext::set_phase(Phase phase, std::string message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!message.empty()) message_ = std::move(message);
  }
  phase_.store(phase, std::memory_order_release);
}

ParseLimits ServingContext::parse_limits() const {
  ParseLimits limits;
  limits.vocab_size = info_.vocab_size;
  return limits;
}

std::shared_ptr<void> ServingContext::track_request() {
  in_flight_.fetch_add(1);
  return std::shared_ptr<void>(nullptr, [this](void*) {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.fetch_sub(1);
    idle_cv_.notify_all();
  });
}

bool ServingContext::wait_idle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_until(lock, deadline, [this] { return in_flight_.load() == 0; });
}

}  // namespace rill::server
