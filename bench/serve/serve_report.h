// vLLM's serving metrics from the records of one `rill bench serve` run: the printed table
// (`vllm bench serve`'s layout and names, its Speculative Decoding section included) and the result JSON
// (vLLM's keys, plus a few of rill's).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/serve/latency_plot.h"
#include "bench/serve/latency_stats.h"
#include "bench/serve/load_generator.h"
#include "bench/serve/spec_decode_stats.h"

namespace rill::bench::serve {

struct RunConfig {
  std::string model, tokenizer, endpoint, dataset_name;
  int num_prompts = 0;
  double request_rate = 0;  // inf: all at once
  double burstiness = 1;
  int max_concurrency = 0;  // 0: none
  uint64_t seed = 0;
  std::vector<double> percentiles{99};       // --metric-percentiles
  std::map<std::string, double> goodput_ms;  // --goodput: ttft / tpot / e2el -> SLO in ms
};

struct ServeMetrics {
  int completed = 0, failed = 0;
  double duration_s = 0;
  int64_t total_input = 0, total_output = 0;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  double request_goodput = -1;  // -1: no --goodput
  LatencySummary ttft_ms, tpot_ms, itl_ms, e2el_ms;
  int max_in_flight = 0;
  // The server's speculative decoding over the run (its /metrics before and after); none when it exports no
  // spec_decode counters. Set by the caller, which scrapes the server.
  std::optional<SpecDecodeStats> spec_decode;
};

ServeMetrics compute_metrics(const LoadResult& load, const RunConfig& config);
std::string format_report(const ServeMetrics& m, const RunConfig& config);
nlohmann::ordered_json result_json(const ServeMetrics& m, const RunConfig& config, const LoadResult& load);

// The plot's point of one result JSON (this run's or a saved --result-file): achieved request rate, mean and
// `tail` (e.g. "p99") TTFT and TPOT. Errors name the missing key.
Result<PlotPoint> plot_point(const nlohmann::ordered_json& result, const std::string& tail);
// "p99", "p99.9": the key fragment of percentile p.
std::string percentile_key(double p);

}  // namespace rill::bench::serve
