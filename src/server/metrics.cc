#include "server/metrics.h"

#include <fmt/format.h>

namespace rill::server {

std::string prometheus_escape(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? fmt::format("{}", bounds_[i]) : "+Inf";
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, le, cumulative);
  }
  out += fmt::format("{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, sum_, name, labels, count_);
}

namespace {

// vLLM's buckets for the same histograms.
std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
          0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
}
std::vector<double> tpot_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> e2e_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,   10.0, 15.0,
          20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0};
}
std::vector<double> length_buckets() {
  return {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

Metrics::Metrics(std::string model_name)
    : labels_(fmt::format("model_name=\"{}\"", prometheus_escape(model_name))),
      ttft_(ttft_buckets()),
      tpot_(tpot_buckets()),
      e2e_(e2e_buckets()),
      prompt_len_(length_buckets()),
      generation_len_(length_buckets()) {}

void Metrics::record_request(const RequestRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[r.finish_reason];
  e2e_.observe(r.e2e_latency);
  prompt_len_.observe(double(r.prompt_tokens));
  generation_len_.observe(double(r.completion_tokens));
  if (r.time_to_first_token >= 0) {
    ttft_.observe(r.time_to_first_token);
    if (r.completion_tokens > 1)
      tpot_.observe((r.e2e_latency - r.time_to_first_token) / double(r.completion_tokens - 1));
  }
}

void Metrics::record_http_status(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++http_[status];
}

std::string Metrics::render(const engine::EngineStats* stats) const {
  const engine::EngineStats s = stats ? *stats : engine::EngineStats{};
  std::string out;
  auto gauge = [&](const char* name, const char* help, double value) {
    header(out, name, "gauge", help);
    out += fmt::format("{}{{{}}} {}\n", name, labels_, value);
  };
  auto counter = [&](const char* name, const char* help, uint64_t value) {
    header(out, name, "counter", help);
    out += fmt::format("{}{{{}}} {}\n", name, labels_, value);
  };
  gauge("rill:num_requests_running", "Requests in the engine's running batch.", s.running);
  gauge("rill:num_requests_waiting", "Requests waiting for admission.", s.waiting);
  gauge("rill:kv_cache_used_blocks", "MLA KV cache blocks in use.", s.kv_blocks_used);
  gauge("rill:kv_cache_total_blocks", "MLA KV cache blocks in total.", s.kv_blocks_total);
  gauge("rill:kv_cache_usage_perc", "Fraction of MLA KV cache blocks in use (0-1).",
        s.kv_blocks_total > 0 ? double(s.kv_blocks_used) / s.kv_blocks_total : 0.0);
  gauge("rill:state_slots_used", "KDA recurrent-state slots in use.", s.state_slots_used);
  gauge("rill:state_slots_total", "KDA recurrent-state slots in total.", s.state_slots_total);
  counter("rill:prompt_tokens_total", "Prompt tokens processed.", s.prompt_tokens_total);
  counter("rill:generation_tokens_total", "Tokens generated.", s.generation_tokens_total);
  counter("rill:num_preemptions_total", "Sequences preempted for lack of cache.", s.preemptions);
  counter("rill:engine_steps_total", "Engine steps run.", s.steps);
  counter("rill:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache at admission.",
          s.prefix_cache_queries);
  counter("rill:prefix_cache_hits_total", "Prompt tokens served from the prefix cache.", s.prefix_cache_hits);
  gauge("rill:prefix_cache_hit_rate", "Prefix cache hits / queries since start, in tokens (0-1).",
        s.prefix_cache_queries > 0 ? double(s.prefix_cache_hits) / double(s.prefix_cache_queries) : 0.0);
  gauge("rill:prefix_cache_blocks", "MLA KV blocks in the prefix cache (held by running requests or idle).",
        s.prefix_cache_blocks);
  gauge("rill:kda_snapshots_used", "KDA state snapshots held by the prefix cache.", s.kda_snapshots_used);
  gauge("rill:kda_snapshots_total", "KDA state snapshot capacity.", s.kda_snapshots_total);
  counter("rill:prefix_cache_evicted_blocks_total", "Cached blocks evicted under memory pressure.",
          s.prefix_cache_evicted_blocks);
  counter("rill:kda_snapshots_evicted_total", "KDA state snapshots evicted under memory pressure.",
          s.kda_snapshots_evicted);

  std::lock_guard<std::mutex> lock(mu_);
  header(out, "rill:request_success_total", "counter", "Requests finished, by finish reason.");
  for (const auto& [reason, n] : finished_)
    out += fmt::format("rill:request_success_total{{{},finished_reason=\"{}\"}} {}\n", labels_,
                       prometheus_escape(reason), n);
  header(out, "rill:http_responses_total", "counter", "HTTP responses sent, by status code.");
  for (const auto& [status, n] : http_)
    out += fmt::format("rill:http_responses_total{{{},code=\"{}\"}} {}\n", labels_, status, n);
  header(out, "rill:time_to_first_token_seconds", "histogram",
         "Time from request arrival to its first token.");
  ttft_.render(out, "rill:time_to_first_token_seconds", labels_);
  header(out, "rill:time_per_output_token_seconds", "histogram",
         "Mean time between output tokens of a request.");
  tpot_.render(out, "rill:time_per_output_token_seconds", labels_);
  header(out, "rill:e2e_request_latency_seconds", "histogram",
         "Time from request arrival to its last token.");
  e2e_.render(out, "rill:e2e_request_latency_seconds", labels_);
  header(out, "rill:request_prompt_tokens", "histogram", "Prompt tokens per request.");
  prompt_len_.render(out, "rill:request_prompt_tokens", labels_);
  header(out, "rill:request_generation_tokens", "histogram", "Generated tokens per request.");
  generation_len_.render(out, "rill:request_generation_tokens", labels_);
  return out;
}

}  // namespace rill::server
