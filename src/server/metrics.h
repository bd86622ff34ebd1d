// Prometheus metrics for GET /metrics, named like vLLM's with a `rill:` prefix (serving.md §1.6): engine
// gauges (running / waiting requests, MLA KV blocks, KDA state slots, prefix cache blocks, snapshots and hit
// rate) read from Engine::stats() at scrape
// time, token counters, request outcomes and latency histograms recorded by the routes. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace rill::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // `name`_bucket{labels,le=...} (cumulative), `name`_sum, `name`_count.
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last one is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

// One engine request's timings, recorded when it finishes.
struct RequestRecord {
  std::string finish_reason;        // stop | length | tool_calls | cancelled | error ...
  double time_to_first_token = -1;  // seconds from arrival; < 0: no token
  double e2e_latency = 0;           // seconds from arrival to finish
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

class Metrics {
 public:
  explicit Metrics(std::string model_name);

  void record_request(const RequestRecord& record);
  void record_http_status(int status);
  // The exposition text; `stats` is null while the model loads.
  std::string render(const engine::EngineStats* stats) const;

 private:
  std::string labels_;  // model_name="..."
  mutable std::mutex mu_;
  Histogram ttft_, tpot_, e2e_, prompt_len_, generation_len_;
  std::map<std::string, uint64_t> finished_;
  std::map<int, uint64_t> http_;
};

// A Prometheus label value with \, " and newlines escaped.
std::string prometheus_escape(const std::string& value);

}  // namespace rill::server
