// What every route sees: the lifecycle phase (loading -> ready -> draining), the engine, tokenizer and chat
// path once loaded, the served model's facts, the metrics, and the count of generation requests in flight
// (graceful shutdown waits for it to reach zero).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/chat_prompt.h"
#include "server/cors.h"
#include "server/metrics.h"
#include "server/openai/sampling_request.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::server {

struct ServingConfig {
  std::string served_model_name;  // the first of served_model_names: responses' model, metrics' label
  std::string model_dir;
  std::string api_key;           // "" = no authentication (else every route but /health needs it)
  bool api_key_metrics = false;  // /metrics needs the key too
  std::vector<std::string> served_model_names;  // every name requests may use and /v1/models lists
  CorsOptions cors;
  bool log_requests = true;      // log each finished and rejected request
  std::optional<uint64_t> seed;  // --seed: the first seed handed to requests that have none

  // True when `model` is one of the served names (an empty list: served_model_name only).
  bool serves(const std::string& model) const;
};

// The loaded model's facts the protocol needs.
struct ModelInfo {
  bool kimi_k3 = false;
  int32_t vocab_size = 0;
  int max_model_len = 0;
  std::vector<int32_t> eos_token_ids;
  // generation_config.json's sampling defaults (--generation-config), under the request field names
  // (temperature, top_p, top_k, repetition_penalty); request fields override them.
  Json sampling_defaults = Json::object();
  int default_max_tokens = 0;  // its max_new_tokens (0: none; the room left in the context)
};

enum class Phase { Loading, Ready, Draining, Stopped, Failed };

class ServingContext {
 public:
  explicit ServingContext(ServingConfig config);

  const ServingConfig& config() const { return config_; }
  Metrics& metrics() { return metrics_; }
  Phase phase() const { return phase_.load(std::memory_order_acquire); }
  // The 503 text while not ready: load progress, draining, or the load failure.
  std::string unavailable_message() const;

  void set_load_progress(int64_t done, int64_t total);
  void set_ready(std::unique_ptr<engine::Engine> engine, std::shared_ptr<const text::Tokenizer> tokenizer,
                 std::unique_ptr<ChatPrompt> chat, ModelInfo info);
  void set_phase(Phase phase, std::string message = "");

  // Valid from Ready on (routes check phase() first).
  engine::Engine& engine() { return *engine_; }
  // Null until set_ready, in any phase (a shutdown that begins while the model loads is Draining without an
  // engine); safe from any thread while set_ready runs.
  engine::Engine* engine_if_loaded() { return loaded_engine_.load(std::memory_order_acquire); }
  const text::Tokenizer& tokenizer() const { return *tokenizer_; }
  const ChatPrompt& chat() const { return *chat_; }
  const ModelInfo& model_info() const { return info_; }
  ParseLimits parse_limits() const;

  // A generation request holds this token from admission until its response is written.
  std::shared_ptr<void> track_request();
  int in_flight() const { return in_flight_.load(); }
  // --seed: the next request seed (seed, seed + 1, ...); nullopt without --seed.
  std::optional<uint64_t> next_seed() {
    if (!config_.seed) return std::nullopt;
    return *config_.seed + next_seed_.fetch_add(1);
  }
  // Waits until no request is in flight or `deadline` passes; true when idle.
  bool wait_idle(std::chrono::steady_clock::time_point deadline);
  // Destroys the engine (after the HTTP threads are gone).
  std::unique_ptr<engine::Engine> release_engine() {
    loaded_engine_.store(nullptr, std::memory_order_release);
    return std::move(engine_);
  }

 private:
  ServingConfig config_;
  Metrics metrics_;
  std::atomic<Phase> phase_{Phase::Loading};
  std::atomic<int64_t> load_done_{0}, load_total_{0};
  mutable std::mutex mu_;
  std::string message_;
  std::condition_variable idle_cv_;
  std::atomic<int> in_flight_{0};
  std::atomic<uint64_t> next_seed_{0};
  std::unique_ptr<engine::Engine> engine_;
  std::atomic<engine::Engine*> loaded_engine_{
      nullptr};  // engine_.get(), published once set_ready has written
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  std::unique_ptr<ChatPrompt> chat_;
  ModelInfo info_;
};

}  // namespace rill::server
