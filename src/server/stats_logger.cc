#include "server/stats_logger.h"

#include <chrono>

#include <fmt/format.h>

#include "core/log.h"
#include "server/serving_context.h"

namespace rill::server {
namespace {

double percent(int64_t part, int64_t whole) {
  return whole > 0 ? 100.0 * double(part) / double(whole) : 0.0;
}

bool active(const engine::EngineStats& before, const engine::EngineStats& now) {
  return now.running > 0 || now.waiting > 0 || now.prompt_tokens_total != before.prompt_tokens_total ||
         now.generation_tokens_total != before.generation_tokens_total;
}

}  // namespace

std::string format_stats_line(const engine::EngineStats& before, const engine::EngineStats& now,
                              double seconds) {
  const uint64_t prompt = now.prompt_tokens_total - before.prompt_tokens_total;
  const uint64_t generated = now.generation_tokens_total - before.generation_tokens_total;
  const uint64_t queries = now.prefix_cache_queries - before.prefix_cache_queries;
  const uint64_t hits = now.prefix_cache_hits - before.prefix_cache_hits;
  const double s = seconds > 0 ? seconds : 1;
  return fmt::format(
      "stats: prompt throughput {:.1f} tokens/s, generation throughput {:.1f} tokens/s ({} prompt + {} "
      "generated tokens in {:.2f} s), running {}, waiting {}, KV blocks {}/{} ({:.1f}%), state slots {}/{} "
      "({:.1f}%), prefix cache hit rate {}",
      double(prompt) / s, double(generated) / s, prompt, generated, seconds, now.running, now.waiting,
      now.kv_blocks_used, now.kv_blocks_total, percent(now.kv_blocks_used, now.kv_blocks_total),
      now.state_slots_used, now.state_slots_total, percent(now.state_slots_used, now.state_slots_total),
      queries > 0 ? fmt::format("{:.1f}%", percent(int64_t(hits), int64_t(queries))) : std::string("-"));
}

StatsLogger::StatsLogger(ServingContext& ctx, double interval_s) : ctx_(ctx), interval_s_(interval_s) {
  if (interval_s_ > 0) thread_ = std::thread([this] { run(); });
}

void StatsLogger::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StatsLogger::run() {
  using Clock = std::chrono::steady_clock;
  const auto interval = std::chrono::microseconds(int64_t(interval_s_ * 1e6));
  engine::EngineStats last;
  bool have_last = false, was_active = false;
  Clock::time_point last_time = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, interval, [this] { return stop_; })) {
    engine::Engine* engine = ctx_.engine_if_loaded();
    if (!engine) continue;
    const engine::EngineStats now = engine->stats();
    const Clock::time_point t = Clock::now();
    if (!have_last) {  // the counters start at zero with the engine
      last = engine::EngineStats{};
      have_last = true;
    }
    const bool is_active = active(last, now);
    // One line after the activity ends too, so the last interval's tokens are counted.
    if (is_active || was_active)
      RILL_LOG_INFO("{}", format_stats_line(last, now, std::chrono::duration<double>(t - last_time).count()));
    was_active = is_active;
    last = now;
    last_time = t;
  }
}

}  // namespace rill::server
