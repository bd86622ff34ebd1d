// vLLM's periodic stats line for `rill serve`: every interval while the engine has work (and once more after
// it goes idle), prompt and generation throughput since the last line from Engine::stats()'s counters, the
// running and waiting requests, MLA KV blocks and KDA state slots in use, and the prefix cache hit rate.
// A thread of the server's own; it stops (joins) before the engine is released.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "engine/engine.h"

namespace rill::server {

class ServingContext;

// The line for the counters moving from `before` to `now` over `seconds`.
std::string format_stats_line(const engine::EngineStats& before, const engine::EngineStats& now,
                              double seconds);

class StatsLogger {
 public:
  StatsLogger(ServingContext& ctx, double interval_s);
  ~StatsLogger() { stop(); }
  StatsLogger(const StatsLogger&) = delete;
  StatsLogger& operator=(const StatsLogger&) = delete;
  void stop();

 private:
  void run();

  ServingContext& ctx_;
  double interval_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rill::server
