#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

#include "server/process_metrics.h"

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

namespace {

// Whole bounds as integers ("1000000", not fmt's shortest "1e+06"), so le labels read like the numbers.
std::string bound_text(double bound) {
  return bound == double(int64_t(bound)) ? std::to_string(int64_t(bound)) : fmt::format("{}", bound);
}

}  // namespace

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
    const std::string le = i < bounds_.size() ? bound_text(bounds_[i]) : "+Inf";
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, le, cumulative);
  }
  out += fmt::format("{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, sum_, name, labels, count_);
}

namespace {

// vLLM's buckets for the same histograms (vllm/v1/metrics/loggers.py).
std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> token_gap_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> latency_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}
// vLLM's 1-2-5 series (build_1_2_5_buckets), up to 2M tokens whatever the model: the metrics exist before
// the model loads, and K3's 1M-token (2^20) contexts must land in a finite bucket.
std::vector<double> length_buckets() {
  std::vector<double> out;
  for (double scale = 1; scale <= 1e6; scale *= 10)
    for (double m : {1.0, 2.0, 5.0}) out.push_back(m * scale);
  out.resize(out.size() - 1);  // ..., 1e6, 2e6
  return out;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

const char* python_bool(bool b) {
  return b ? "True" : "False";  // vLLM's info labels are str() of the config values
}

}  // namespace

std::string vllm_finished_reason(const std::string& reason) {
  if (reason == "tool_calls") return "stop";  // the engine stopped at the end of the message
  if (reason == "server_interrupted" || reason == "cancelled") return "abort";
  return reason;
}

Metrics::Metrics(std::string model_name)
    : labels_(fmt::format("model_name=\"{}\"", prometheus_escape(model_name))),
      ttft_(ttft_buckets()),
      itl_(token_gap_buckets()),
      request_tpot_(token_gap_buckets()),
      e2e_(latency_buckets()),
      queue_(latency_buckets()),
      prefill_(latency_buckets()),
      decode_(latency_buckets()),
      inference_(latency_buckets()),
      prompt_len_(length_buckets()),
      generation_len_(length_buckets()) {}

void Metrics::record_request(const RequestRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[vllm_finished_reason(r.finish_reason)];
  e2e_.observe(r.e2e_latency);
  prompt_len_.observe(double(r.prompt_tokens));
  generation_len_.observe(double(r.completion_tokens));
  if (r.time_to_first_token >= 0) {
    ttft_.observe(r.time_to_first_token);
    const double decode = std::max(0.0, r.last_token - r.time_to_first_token);
    decode_.observe(decode);
    if (r.completion_tokens > 1) request_tpot_.observe(decode / double(r.completion_tokens - 1));
    if (r.prefill_seconds >= 0) inference_.observe(r.prefill_seconds + decode);
  }
  if (r.queue_seconds >= 0) queue_.observe(r.queue_seconds);
  if (r.prefill_seconds >= 0) prefill_.observe(r.prefill_seconds);
}

void Metrics::record_inter_token_latency(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.observe(seconds);
}

void Metrics::record_http_status(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++http_[status];
}

void Metrics::set_cache_config(const CacheConfigInfo& info) {
  std::lock_guard<std::mutex> lock(mu_);
  cache_config_ = info;
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
  // Host tier (--kv-offloading-size): hits by tier, bytes moved, host time before steps, occupancy.
  counter("rill:prefix_cache_hits_host_total",
          "Prompt tokens of prefix-cache hits whose blocks came back from the host tier.", s.prefix_cache_hits_host);
  counter("rill:kv_offload_bytes_to_host_total", "Bytes of MLA blocks and KDA snapshots offloaded to the host tier.",
          s.kv_offload_bytes_to_host);
  counter("rill:kv_offload_bytes_to_device_total", "Bytes brought back from the host tier for prefix hits.",
          s.kv_offload_bytes_to_device);
  header(out, "rill:kv_offload_wait_seconds_total", "counter",
         "Host seconds steps spent on host-tier copies before running (CUDA: issuing them).");
  out += fmt::format("rill:kv_offload_wait_seconds_total{{{}}} {}\n", labels_, s.kv_offload_wait_seconds);
  gauge("rill:host_tier_blocks", "MLA blocks in the host tier.", s.host_tier_blocks);
  gauge("rill:host_tier_blocks_total", "MLA block capacity of the host tier.", s.host_tier_blocks_total);
  gauge("rill:host_tier_snapshots", "KDA snapshots in the host tier.", s.host_tier_snapshots);
  gauge("rill:host_tier_snapshots_total", "KDA snapshot capacity of the host tier.", s.host_tier_snapshots_total);
  // Disk tier (--kv-offloading-dir): hits read from it, bytes each way, its files, and its faults.
  counter("rill:prefix_cache_hits_disk_total",
          "Prompt tokens of prefix-cache hits whose blocks were read from the disk tier.", s.prefix_cache_hits_disk);
  counter("rill:kv_offload_bytes_to_disk_total", "Bytes of files written to the disk tier.", s.kv_offload_bytes_to_disk);
  counter("rill:kv_offload_bytes_from_disk_total", "Bytes read from the disk tier for prefix hits.",
          s.kv_offload_bytes_from_disk);
  gauge("rill:disk_tier_files", "Files in the disk tier.", double(s.disk_tier_files));
  gauge("rill:disk_tier_bytes", "Bytes of the disk tier's files.", double(s.disk_tier_bytes));
  counter("rill:disk_tier_write_errors_total", "Disk tier writes that failed (full or read-only disk, I/O errors).",
          s.disk_tier_write_errors);
  counter("rill:disk_tier_read_errors_total",
          "Disk tier files that failed their checks when read (corrupt, truncated) or could not be read.",
          s.disk_tier_read_errors);
  counter("rill:disk_tier_writes_dropped_total",
          "Items not written to the disk tier: its writer behind, the tier read-only or off after a failure.",
          s.disk_tier_writes_dropped);
  {  // EngineStats keeps per-bucket counts; Prometheus wants them cumulative
    const char* name = "rill:iteration_tokens_total";
    header(out, name, "histogram",
           "Tokens per engine step: prompt tokens computed plus tokens sampled (vLLM's buckets).");
    uint64_t cumulative = 0;
    const auto& bounds = engine::EngineStats::kIterationTokenBuckets;
    for (size_t i = 0; i < s.iteration_tokens_counts.size(); ++i) {
      cumulative += s.iteration_tokens_counts[i];
      const std::string le = i < bounds.size() ? std::to_string(bounds[i]) : "+Inf";
      out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels_, le, cumulative);
    }
    out += fmt::format("{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels_, s.iteration_tokens_sum, name,
                       labels_, cumulative);
  }

  if (!s.spec_acceptance_lengths.empty()) {  // speculative decoding on (vLLM's spec_decode_* metrics)
    counter("rill:spec_decode_num_drafts_total", "Verify steps of a sequence with draft tokens.",
            s.spec_num_drafts);
    counter("rill:spec_decode_num_draft_tokens_total", "Draft tokens fed to verify steps.",
            s.spec_num_draft_tokens);
    counter("rill:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
            s.spec_num_accepted_tokens);
    counter("rill:spec_decode_num_stopped_sequences_total",
            "Sequences that stopped speculating: acceptance below break-even.", s.spec_num_stopped_sequences);
    const char* name = "rill:spec_decode_acceptance_length";
    header(out, name, "histogram", "Tokens a verify step emitted: its accepted drafts plus one.");
    uint64_t cumulative = 0, sum = 0;
    for (size_t i = 0; i < s.spec_acceptance_lengths.size(); ++i) {
      cumulative += s.spec_acceptance_lengths[i];
      sum += (i + 1) * s.spec_acceptance_lengths[i];
      out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels_, i + 1, cumulative);
    }
    out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels_, cumulative);
    out += fmt::format("{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels_, sum, name, labels_, cumulative);
  }

  std::lock_guard<std::mutex> lock(mu_);
  if (cache_config_) {
    header(out, "rill:cache_config_info", "gauge",
           "The engine's cache configuration (vLLM's CacheConfig info; the value is always 1).");
    out += fmt::format(
        "rill:cache_config_info{{{},block_size=\"{}\",num_gpu_blocks=\"{}\",num_state_slots=\"{}\","
        "enable_prefix_caching=\"{}\",kda_snapshot_interval=\"{}\",num_kda_snapshots=\"{}\"}} 1\n",
        labels_, cache_config_->block_size, s.kv_blocks_total, s.state_slots_total,
        python_bool(cache_config_->enable_prefix_caching), cache_config_->kda_snapshot_interval,
        s.kda_snapshots_total);
  }
  header(out, "rill:request_success_total", "counter",
         "Requests finished, by vLLM's finished_reason (stop, length, abort, error).");
  for (const auto& [reason, n] : finished_)
    out += fmt::format("rill:request_success_total{{{},finished_reason=\"{}\"}} {}\n", labels_,
                       prometheus_escape(reason), n);
  header(out, "rill:http_responses_total", "counter", "HTTP responses sent, by status code.");
  for (const auto& [status, n] : http_)
    out += fmt::format("rill:http_responses_total{{{},code=\"{}\"}} {}\n", labels_, status, n);
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    header(out, name, "histogram", help);
    h.render(out, name, labels_);
  };
  histogram("rill:time_to_first_token_seconds", "Time from request arrival to its first token.", ttft_);
  histogram("rill:inter_token_latency_seconds",
            "Time between consecutive token events of a request (one observation per event).", itl_);
  histogram("rill:time_per_output_token_seconds",
            "DEPRECATED: use rill:inter_token_latency_seconds (the same observations, as in vLLM).", itl_);
  histogram("rill:request_time_per_output_token_seconds",
            "Per request: decode time / (generated tokens - 1), for requests with two tokens or more.",
            request_tpot_);
  histogram("rill:e2e_request_latency_seconds", "Time from request arrival to its finish.", e2e_);
  histogram("rill:request_queue_time_seconds", "Time a request waited before the engine first scheduled it.",
            queue_);
  histogram("rill:request_prefill_time_seconds",
            "Time from a request's first scheduling to its first token (its prefill).", prefill_);
  histogram("rill:request_decode_time_seconds", "Time from a request's first token to its last.", decode_);
  histogram("rill:request_inference_time_seconds",
            "Time from a request's first scheduling to its last token (prefill + decode).", inference_);
  histogram("rill:request_prompt_tokens", "Prompt tokens per request.", prompt_len_);
  histogram("rill:request_generation_tokens", "Generated tokens per request (aborted ones: those generated).",
            generation_len_);
  if (auto process = read_process_stats()) render_process_stats(out, *process);
  return with_prefix(std::move(out));
}

namespace {
std::mutex g_prefix_mu;
std::string g_prefix = "rill";
}  // namespace

void set_metrics_prefix(std::string prefix) {
  std::lock_guard lock(g_prefix_mu);
  g_prefix = std::move(prefix);
}

std::string with_prefix(std::string text) {
  std::string prefix;
  {
    std::lock_guard lock(g_prefix_mu);
    prefix = g_prefix;
  }
  if (prefix == "rill") return text;
  // Metric names begin a line, or follow "# HELP " / "# TYPE "; the help texts name metrics too.
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t j = text.find("rill:", i);
    if (j == std::string::npos) {
      out.append(text, i, std::string::npos);
      break;
    }
    out.append(text, i, j - i);
    const bool name_start = j == 0 || text[j - 1] == '\n' || text[j - 1] == ' ';
    out += name_start ? prefix + ":" : std::string("rill:");
    i = j + 5;
  }
  return out;
}

}  // namespace rill::server
