// The Prometheus exposition text: names, labels, cumulative histogram buckets, escaping.
#include <gtest/gtest.h>

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
  m.record_request({"stop", 0.003, 0.5, 10, 5});
  m.record_request({"length", 0.2, 1.0, 20, 11});
  m.record_request({"stop", -1, 0.1, 5, 0});
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
  // TPOT: (0.5 - 0.003) / 4 and (1.0 - 0.2) / 10.
  EXPECT_EQ(sample(text, "rill:time_per_output_token_seconds_count{" + l + "}"), 2);
}

TEST(Metrics, LabelValuesAreEscaped) {
  EXPECT_EQ(prometheus_escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  Metrics m("we\"ird");
  EXPECT_NE(m.render(nullptr).find("model_name=\"we\\\"ird\""), std::string::npos);
}

}  // namespace
}  // namespace rill::server
