// Prometheus metrics for GET /metrics, vLLM's names and meanings with a `rill:` prefix (serving.md §1.6,
// docs/METRICS.md): engine gauges and counters (running / waiting requests, MLA KV blocks, KDA state slots,
// prefix cache, the per-step token histogram, speculative decoding's spec_decode_* counters and acceptance lengths) read from Engine::stats() at scrape time; request outcomes and
// latency histograms recorded by the routes as each engine request finishes (aborted ones included, with
// what they had received); cache_config_info; and the process_* metrics of /proc/self. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
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

// One engine request's timings, recorded when it finishes (or is aborted). Times are seconds from the
// request's arrival at the server, as the server saw its events.
struct RequestRecord {
  std::string finish_reason;  // the choice's: stop | length | tool_calls | abort | server_interrupted | error
  double e2e_latency = 0;     // arrival to finish
  double time_to_first_token = -1;  // arrival to the first event with tokens; < 0: no token
  double last_token = -1;           // arrival to the last event with tokens
  int64_t prompt_tokens = 0, completion_tokens = 0;
  double queue_seconds = -1, prefill_seconds = -1;  // StreamEvent's (engine-measured); < 0: not measured
};

// What cache_config_info shows besides the block counts of EngineStats.
struct CacheConfigInfo {
  int block_size = 0;
  bool enable_prefix_caching = false;
  int kda_snapshot_interval = 0;
};

class Metrics {
 public:
  explicit Metrics(std::string model_name);

  // vLLM's meanings: request_success_total{finished_reason} counts it (tool_calls as "stop",
  // server_interrupted as "abort"); e2e, prompt and generation lengths are observed for every request;
  // time_to_first_token when it got a token; request_time_per_output_token (decode time over tokens after
  // the first) when it got two or more; decode (first to last token) when it got one; queue, prefill and
  // inference (prefill + decode) when the engine measured them.
  void record_request(const RequestRecord& record);
  // vLLM's inter_token_latency_seconds: the gap between two consecutive events with tokens of one request,
  // observed once per event whatever its token count (as vLLM observes one per engine output). The first
  // event's gap is the TTFT instead.
  void record_inter_token_latency(double seconds);
  void record_http_status(int status);
  void set_cache_config(const CacheConfigInfo& info);
  // The exposition text; `stats` is null while the model loads.
  std::string render(const engine::EngineStats* stats) const;

 private:
  std::string labels_;  // model_name="..."
  mutable std::mutex mu_;
  Histogram ttft_, itl_, request_tpot_, e2e_, queue_, prefill_, decode_, inference_, prompt_len_,
      generation_len_;
  std::map<std::string, uint64_t> finished_;
  std::map<int, uint64_t> http_;
  std::optional<CacheConfigInfo> cache_config_;
};

// `rill serve --metrics-prefix vllm`: metric names start with "vllm:" instead of "rill:" (the same names and
// meanings as vLLM's, so its dashboards and autoscalers read them unchanged). Process-wide; set before serving.
void set_metrics_prefix(std::string prefix);
// `text` (the exposition) with each metric name's "rill:" replaced by the prefix.
std::string with_prefix(std::string text);

// A Prometheus label value with \, " and newlines escaped.
std::string prometheus_escape(const std::string& value);
// vLLM's finished_reason for one of rill's choice finish reasons.
std::string vllm_finished_reason(const std::string& reason);

}  // namespace rill::server
