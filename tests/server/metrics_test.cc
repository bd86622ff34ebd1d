// The Prometheus exposition text: names, labels, cumulative histogram buckets, escaping.
#include <gtest/gtest.h>

#include <ctime>
#include <sstream>

#include "server/metrics.h"

namespace rill::server {
namespace {

// The value of the sample line that starts with `series` (name{labels}), or -1.
double sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with(series + " ")) return std::stod(line.substr(series.size() + 1));
  return -1;
}

TEST(Metrics, EngineGaugesAndCounters) {
  Metrics m("tiny");
  engine::EngineStats s;
  s.running = 3;
  s.waiting = 2;
  s.kv_blocks_used = 5;
  s.kv_blocks_total = 20;
  s.state_slots_used = 3;
  s.state_slots_total = 8;
  s.prompt_tokens_total = 100;
  s.generation_tokens_total = 40;
  s.prefix_cache_queries = 200;
  s.prefix_cache_hits = 50;
  s.prefix_cache_blocks = 7;
  s.kda_snapshots_used = 2;
  s.kda_snapshots_total = 9;
  s.prefix_cache_hits_host = 30;
  s.kv_offload_bytes_to_host = 4096;
  s.kv_offload_bytes_to_device = 2048;
  s.kv_offload_wait_seconds = 0.25;
  s.host_tier_blocks = 11;
  s.host_tier_blocks_total = 64;
  s.host_tier_snapshots = 3;
  s.host_tier_snapshots_total = 8;
  s.disk_tier = true;
  s.prefix_cache_hits_disk = 12;
  s.kv_offload_bytes_to_disk = 8192;
  s.kv_offload_bytes_from_disk = 1024;
  s.disk_tier_files = 6;
  s.disk_tier_bytes = 9000;
  s.disk_tier_write_errors = 1;
  s.disk_tier_read_errors = 2;
  s.disk_tier_writes_dropped = 4;
  const std::string text = m.render(&s);
  const std::string l = "{model_name=\"tiny\"}";
  EXPECT_EQ(sample(text, "rill:num_requests_running" + l), 3);
  EXPECT_EQ(sample(text, "rill:num_requests_waiting" + l), 2);
  EXPECT_EQ(sample(text, "rill:kv_cache_used_blocks" + l), 5);
  EXPECT_EQ(sample(text, "rill:kv_cache_total_blocks" + l), 20);
  EXPECT_DOUBLE_EQ(sample(text, "rill:kv_cache_usage_perc" + l), 0.25);
  EXPECT_EQ(sample(text, "rill:state_slots_used" + l), 3);
  EXPECT_EQ(sample(text, "rill:state_slots_total" + l), 8);
  EXPECT_EQ(sample(text, "rill:prompt_tokens_total" + l), 100);
  EXPECT_EQ(sample(text, "rill:generation_tokens_total" + l), 40);
  EXPECT_EQ(sample(text, "rill:prefix_cache_queries_total" + l), 200);
  EXPECT_EQ(sample(text, "rill:prefix_cache_hits_total" + l), 50);
  EXPECT_DOUBLE_EQ(sample(text, "rill:prefix_cache_hit_rate" + l), 0.25);
  EXPECT_EQ(sample(text, "rill:prefix_cache_blocks" + l), 7);
  EXPECT_EQ(sample(text, "rill:kda_snapshots_used" + l), 2);
  EXPECT_EQ(sample(text, "rill:kda_snapshots_total" + l), 9);
  EXPECT_EQ(sample(text, "rill:prefix_cache_hits_host_total" + l), 30);
  EXPECT_EQ(sample(text, "rill:kv_offload_bytes_to_host_total" + l), 4096);
  EXPECT_EQ(sample(text, "rill:kv_offload_bytes_to_device_total" + l), 2048);
  EXPECT_DOUBLE_EQ(sample(text, "rill:kv_offload_wait_seconds_total" + l), 0.25);
  EXPECT_EQ(sample(text, "rill:host_tier_blocks" + l), 11);
  EXPECT_EQ(sample(text, "rill:host_tier_blocks_total" + l), 64);
  EXPECT_EQ(sample(text, "rill:host_tier_snapshots" + l), 3);
  EXPECT_EQ(sample(text, "rill:host_tier_snapshots_total" + l), 8);
  EXPECT_EQ(sample(text, "rill:prefix_cache_hits_disk_total" + l), 12);
  EXPECT_EQ(sample(text, "rill:kv_offload_bytes_to_disk_total" + l), 8192);
  EXPECT_EQ(sample(text, "rill:kv_offload_bytes_from_disk_total" + l), 1024);
  EXPECT_EQ(sample(text, "rill:disk_tier_files" + l), 6);
  EXPECT_EQ(sample(text, "rill:disk_tier_bytes" + l), 9000);
  EXPECT_EQ(sample(text, "rill:disk_tier_write_errors_total" + l), 1);
  EXPECT_EQ(sample(text, "rill:disk_tier_read_errors_total" + l), 2);
  EXPECT_EQ(sample(text, "rill:disk_tier_writes_dropped_total" + l), 4);
  EXPECT_NE(text.find("# TYPE rill:num_requests_running gauge\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE rill:prompt_tokens_total counter\n"), std::string::npos);
}

TEST(Metrics, WhileLoadingEverythingIsZero) {
  Metrics m("tiny");
  const std::string text = m.render(nullptr);
  EXPECT_EQ(sample(text, "rill:kv_cache_used_blocks{model_name=\"tiny\"}"), 0);
}

TEST(Metrics, RequestHistogramsAreCumulative) {
  Metrics m("tiny");
  m.record_request({.finish_reason = "stop",
                    .e2e_latency = 0.5,
                    .time_to_first_token = 0.003,
                    .last_token = 0.5,
                    .prompt_tokens = 10,
                    .completion_tokens = 5});
  m.record_request({.finish_reason = "length",
                    .e2e_latency = 1.0,
                    .time_to_first_token = 0.2,
                    .last_token = 0.9,
                    .prompt_tokens = 20,
                    .completion_tokens = 11});
  m.record_request({.finish_reason = "stop", .e2e_latency = 0.1, .prompt_tokens = 5});
  m.record_http_status(200);
  m.record_http_status(400);
  m.record_http_status(400);
  const std::string text = m.render(nullptr);
  const std::string l = "model_name=\"tiny\"";
  EXPECT_EQ(sample(text, "rill:request_success_total{" + l + ",finished_reason=\"stop\"}"), 2);
  EXPECT_EQ(sample(text, "rill:request_success_total{" + l + ",finished_reason=\"length\"}"), 1);
  EXPECT_EQ(sample(text, "rill:http_responses_total{" + l + ",code=\"400\"}"), 2);
  EXPECT_EQ(sample(text, "rill:time_to_first_token_seconds_bucket{" + l + ",le=\"0.001\"}"), 0);
  EXPECT_EQ(sample(text, "rill:time_to_first_token_seconds_bucket{" + l + ",le=\"0.005\"}"), 1);
  EXPECT_EQ(sample(text, "rill:time_to_first_token_seconds_bucket{" + l + ",le=\"0.25\"}"), 2);
  EXPECT_EQ(sample(text, "rill:time_to_first_token_seconds_bucket{" + l + ",le=\"+Inf\"}"), 2);
  EXPECT_EQ(sample(text, "rill:time_to_first_token_seconds_count{" + l + "}"), 2);
  EXPECT_DOUBLE_EQ(sample(text, "rill:e2e_request_latency_seconds_sum{" + l + "}"), 1.6);
  EXPECT_EQ(sample(text, "rill:e2e_request_latency_seconds_count{" + l + "}"), 3);
  // Per-request TPOT: decode / (n - 1) = (0.5 - 0.003) / 4 and (0.9 - 0.2) / 10.
  EXPECT_EQ(sample(text, "rill:request_time_per_output_token_seconds_count{" + l + "}"), 2);
  EXPECT_NEAR(sample(text, "rill:request_time_per_output_token_seconds_sum{" + l + "}"), 0.497 / 4 + 0.07,
              1e-12);
  EXPECT_EQ(sample(text, "rill:request_decode_time_seconds_count{" + l + "}"), 2);
  EXPECT_NEAR(sample(text, "rill:request_decode_time_seconds_sum{" + l + "}"), 0.497 + 0.7, 1e-12);
  // Without the engine's timestamps there is no queue, prefill or inference time to observe.
  EXPECT_EQ(sample(text, "rill:request_queue_time_seconds_count{" + l + "}"), 0);
  EXPECT_EQ(sample(text, "rill:request_inference_time_seconds_count{" + l + "}"), 0);
}

TEST(Metrics, EngineTimesMakeQueuePrefillAndInference) {
  Metrics m("tiny");
  m.record_request({.finish_reason = "stop",
                    .e2e_latency = 2.0,
                    .time_to_first_token = 1.0,
                    .last_token = 1.75,
                    .prompt_tokens = 3,
                    .completion_tokens = 4,
                    .queue_seconds = 0.25,
                    .prefill_seconds = 0.5});
  const std::string text = m.render(nullptr);
  const std::string l = "{model_name=\"tiny\"}";
  EXPECT_DOUBLE_EQ(sample(text, "rill:request_queue_time_seconds_sum" + l), 0.25);
  EXPECT_DOUBLE_EQ(sample(text, "rill:request_prefill_time_seconds_sum" + l), 0.5);
  EXPECT_DOUBLE_EQ(sample(text, "rill:request_decode_time_seconds_sum" + l), 0.75);
  EXPECT_DOUBLE_EQ(sample(text, "rill:request_inference_time_seconds_sum" + l), 1.25);  // prefill + decode
  EXPECT_DOUBLE_EQ(sample(text, "rill:request_time_per_output_token_seconds_sum" + l), 0.25);
}

TEST(Metrics, InterTokenLatencyAndItsDeprecatedAlias) {
  Metrics m("tiny");
  for (double gap : {0.02, 0.03, 0.5}) m.record_inter_token_latency(gap);
  const std::string text = m.render(nullptr);
  const std::string l = "model_name=\"tiny\"";
  for (const char* name : {"rill:inter_token_latency_seconds", "rill:time_per_output_token_seconds"}) {
    EXPECT_EQ(sample(text, std::string(name) + "_count{" + l + "}"), 3) << name;
    EXPECT_EQ(sample(text, std::string(name) + "_bucket{" + l + ",le=\"0.025\"}"), 1) << name;
    EXPECT_EQ(sample(text, std::string(name) + "_bucket{" + l + ",le=\"0.05\"}"), 2) << name;
    EXPECT_DOUBLE_EQ(sample(text, std::string(name) + "_sum{" + l + "}"), 0.55) << name;
  }
}

TEST(Metrics, FinishReasonsAreVllms) {
  EXPECT_EQ(vllm_finished_reason("tool_calls"), "stop");
  EXPECT_EQ(vllm_finished_reason("server_interrupted"), "abort");
  EXPECT_EQ(vllm_finished_reason("length"), "length");
  Metrics m("tiny");
  m.record_request({.finish_reason = "abort",
                    .e2e_latency = 1,
                    .time_to_first_token = 0.1,
                    .last_token = 0.4,
                    .prompt_tokens = 300000,
                    .completion_tokens = 7});
  m.record_request({.finish_reason = "tool_calls", .e2e_latency = 1, .prompt_tokens = 1048576});
  const std::string text = m.render(nullptr);
  const std::string l = "model_name=\"tiny\"";
  EXPECT_EQ(sample(text, "rill:request_success_total{" + l + ",finished_reason=\"abort\"}"), 1);
  EXPECT_EQ(sample(text, "rill:request_success_total{" + l + ",finished_reason=\"stop\"}"), 1);
  // An abort keeps its lengths; the 1-2-5 length buckets reach 1M-token (2^20) prompts.
  EXPECT_EQ(sample(text, "rill:request_generation_tokens_bucket{" + l + ",le=\"5\"}"), 1);  // the 0-token one
  EXPECT_EQ(sample(text, "rill:request_generation_tokens_bucket{" + l + ",le=\"10\"}"), 2);
  EXPECT_EQ(sample(text, "rill:request_prompt_tokens_bucket{" + l + ",le=\"500000\"}"), 1);
  EXPECT_EQ(sample(text, "rill:request_prompt_tokens_bucket{" + l + ",le=\"1000000\"}"), 1);
  EXPECT_EQ(sample(text, "rill:request_prompt_tokens_bucket{" + l + ",le=\"2000000\"}"), 2);
}

TEST(Metrics, IterationTokensFromEngineStats) {
  engine::EngineStats s;
  for (int tokens : {1, 1, 9, 300, 20000}) s.observe_iteration_tokens(tokens);
  const std::string text = Metrics("tiny").render(&s);
  const std::string l = "model_name=\"tiny\"";
  EXPECT_EQ(sample(text, "rill:iteration_tokens_total_bucket{" + l + ",le=\"1\"}"), 2);
  EXPECT_EQ(sample(text, "rill:iteration_tokens_total_bucket{" + l + ",le=\"8\"}"), 2);
  EXPECT_EQ(sample(text, "rill:iteration_tokens_total_bucket{" + l + ",le=\"16\"}"), 3);
  EXPECT_EQ(sample(text, "rill:iteration_tokens_total_bucket{" + l + ",le=\"512\"}"), 4);
  EXPECT_EQ(sample(text, "rill:iteration_tokens_total_bucket{" + l + ",le=\"16384\"}"), 4);
  EXPECT_EQ(sample(text, "rill:iteration_tokens_total_bucket{" + l + ",le=\"+Inf\"}"), 5);
  EXPECT_EQ(sample(text, "rill:iteration_tokens_total_count{" + l + "}"), 5);
  EXPECT_EQ(sample(text, "rill:iteration_tokens_total_sum{" + l + "}"), 20311);
}

TEST(Metrics, CacheConfigInfoAndProcess) {
  Metrics m("tiny");
  EXPECT_EQ(m.render(nullptr).find("rill:cache_config_info"),
            std::string::npos);  // not before the engine exists
  m.set_cache_config({.block_size = 64, .enable_prefix_caching = true, .kda_snapshot_interval = 256});
  engine::EngineStats s;
  s.kv_blocks_total = 100;
  s.state_slots_total = 8;
  s.kda_snapshots_total = 12;
  const std::string text = m.render(&s);
  EXPECT_EQ(sample(text,
                   "rill:cache_config_info{model_name=\"tiny\",block_size=\"64\",num_gpu_blocks=\"100\","
                   "num_state_slots=\"8\",enable_prefix_caching=\"True\",kda_snapshot_interval=\"256\","
                   "num_kda_snapshots=\"12\"}"),
            1);
  // process_*: this test process, as /proc/self/status tells it.
  EXPECT_GT(sample(text, "process_resident_memory_bytes"), 0);
  EXPECT_GT(sample(text, "process_open_fds"), 2);  // stdin, stdout, stderr at least
  EXPECT_GE(sample(text, "process_max_fds"), sample(text, "process_open_fds"));
  const double start = sample(text, "process_start_time_seconds");
  const double now = double(std::time(nullptr));
  EXPECT_LE(start, now + 1);
  EXPECT_GT(start, now - 3600);  // a test process started within the hour
}

TEST(Metrics, LabelValuesAreEscaped) {
  EXPECT_EQ(prometheus_escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  Metrics m("we\"ird");
  EXPECT_NE(m.render(nullptr).find("model_name=\"we\\\"ird\""), std::string::npos);
}

// Speculative decoding's counters and acceptance lengths, as EngineStats keeps them; absent without it.
TEST(Metrics, SpecDecodeFromEngineStats) {
  engine::EngineStats s;
  const std::string l = "model_name=\"tiny\"";
  EXPECT_EQ(Metrics("tiny").render(&s).find("spec_decode"), std::string::npos);
  s.spec_num_drafts = 6;
  s.spec_num_draft_tokens = 18;
  s.spec_num_accepted_tokens = 7;
  s.spec_acceptance_lengths = {2, 1, 2, 1};  // k = 3: steps that emitted 1, 2, 3 and 4 tokens
  s.spec_num_stopped_sequences = 3;
  const std::string text = Metrics("tiny").render(&s);
  EXPECT_EQ(sample(text, "rill:spec_decode_num_drafts_total{" + l + "}"), 6);
  EXPECT_EQ(sample(text, "rill:spec_decode_num_draft_tokens_total{" + l + "}"), 18);
  EXPECT_EQ(sample(text, "rill:spec_decode_num_accepted_tokens_total{" + l + "}"), 7);
  EXPECT_EQ(sample(text, "rill:spec_decode_num_stopped_sequences_total{" + l + "}"), 3);
  EXPECT_EQ(sample(text, "rill:spec_decode_acceptance_length_bucket{" + l + ",le=\"1\"}"), 2);
  EXPECT_EQ(sample(text, "rill:spec_decode_acceptance_length_bucket{" + l + ",le=\"3\"}"), 5);
  EXPECT_EQ(sample(text, "rill:spec_decode_acceptance_length_bucket{" + l + ",le=\"+Inf\"}"), 6);
  EXPECT_EQ(sample(text, "rill:spec_decode_acceptance_length_count{" + l + "}"), 6);
  EXPECT_EQ(sample(text, "rill:spec_decode_acceptance_length_sum{" + l + "}"), 2 + 2 + 6 + 4);  // = 6 + 7
}

}  // namespace
}  // namespace rill::server

namespace rill::server {
namespace {

// --metrics-prefix vllm: every metric name (and the help texts naming one) starts with "vllm:", so vLLM's
// dashboards read them unchanged; label values keep their text. Compared with the rill: exposition, renamed by
// hand.
// The exposition without the process_* lines, which change between two scrapes.
std::string without_process_metrics(const std::string& text) {
  std::string out, line;
  for (size_t i = 0; i < text.size(); i += line.size() + 1) {
    line = text.substr(i, text.find('\n', i) - i);
    if (!line.starts_with("process_") && !line.starts_with("# HELP process_") && !line.starts_with("# TYPE process_"))
      out += line + "\n";
  }
  return out;
}

TEST(Metrics, PrefixRenamesEveryMetric) {
  Metrics m("rill:model");  // a label value that looks like a prefix stays as it is
  engine::EngineStats s;
  s.running = 2;
  const std::string rill = without_process_metrics(m.render(&s));
  set_metrics_prefix("vllm");
  const std::string vllm = without_process_metrics(m.render(&s));
  set_metrics_prefix("rill");
  std::string want;
  for (size_t i = 0; i < rill.size();) {
    const size_t j = rill.find("rill:", i);
    if (j == std::string::npos) {
      want += rill.substr(i);
      break;
    }
    const bool in_label = j > 0 && rill[j - 1] == '"';
    want += rill.substr(i, j - i) + (in_label ? "rill:" : "vllm:");
    i = j + 5;
  }
  EXPECT_EQ(vllm, want);
  EXPECT_NE(vllm.find("\nvllm:num_requests_running{model_name=\"rill:model\"} 2\n"), std::string::npos) << vllm;
}

}  // namespace
}  // namespace rill::server
