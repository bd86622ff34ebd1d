// Speculative decoding from two hand-written /metrics scrapes (rill's names and vLLM's): the deltas, vLLM's
// acceptance rate and mean acceptance length, per-position acceptance worked out by hand from the verify
// steps each histogram describes, and the report's section and JSON keys.
#include <gtest/gtest.h>

#include "bench/serve/serve_report.h"
#include "bench/serve/spec_decode_stats.h"

namespace rill::bench::serve {
namespace {

// rill serve's exposition (src/server/metrics.cc's layout). Before: 10 verify steps that emitted 1, 1, 2, 3,
// 3, 4, 5, 5, 5, 5 tokens (k = 4): 24 drafts accepted of 40. After: 5 more steps emitting 1, 5, 5, 3, 2
// tokens, i.e. 11 more accepted of 20 more drafted.
constexpr const char* kRillBefore = R"(# HELP rill:generation_tokens_total Tokens generated.
# TYPE rill:generation_tokens_total counter
rill:generation_tokens_total{model_name="demo"} 500
# TYPE rill:spec_decode_num_drafts_total counter
rill:spec_decode_num_drafts_total{model_name="demo"} 10
rill:spec_decode_num_draft_tokens_total{model_name="demo"} 40
rill:spec_decode_num_accepted_tokens_total{model_name="demo"} 24
rill:spec_decode_num_stopped_sequences_total{model_name="demo"} 0
# TYPE rill:spec_decode_acceptance_length histogram
rill:spec_decode_acceptance_length_bucket{model_name="demo",le="1"} 2
rill:spec_decode_acceptance_length_bucket{model_name="demo",le="2"} 3
rill:spec_decode_acceptance_length_bucket{model_name="demo",le="3"} 5
rill:spec_decode_acceptance_length_bucket{model_name="demo",le="4"} 6
rill:spec_decode_acceptance_length_bucket{model_name="demo",le="5"} 10
rill:spec_decode_acceptance_length_bucket{model_name="demo",le="+Inf"} 10
rill:spec_decode_acceptance_length_sum{model_name="demo"} 34
rill:spec_decode_acceptance_length_count{model_name="demo"} 10
)";
constexpr const char* kRillAfter = R"(rill:generation_tokens_total{model_name="demo"} 600
rill:spec_decode_num_drafts_total{model_name="demo"} 15
rill:spec_decode_num_draft_tokens_total{model_name="demo"} 60
rill:spec_decode_num_accepted_tokens_total{model_name="demo"} 35
rill:spec_decode_acceptance_length_bucket{model_name="demo",le="1"} 3
rill:spec_decode_acceptance_length_bucket{model_name="demo",le="2"} 5
rill:spec_decode_acceptance_length_bucket{model_name="demo",le="3"} 8
rill:spec_decode_acceptance_length_bucket{model_name="demo",le="4"} 9
rill:spec_decode_acceptance_length_bucket{model_name="demo",le="5"} 15
rill:spec_decode_acceptance_length_bucket{model_name="demo",le="+Inf"} 15
rill:spec_decode_acceptance_length_sum{model_name="demo"} 50
rill:spec_decode_acceptance_length_count{model_name="demo"} 15
)";

SpecDecodeCounters counters_of(const char* text) {
  auto samples = parse_prometheus_text(text);
  EXPECT_TRUE(samples.ok()) << samples.status().to_string();
  auto c = read_spec_decode_counters(*samples);
  EXPECT_TRUE(c.has_value());
  return c.value_or(SpecDecodeCounters{});
}

TEST(SpecDecodeStats, RillCountersAndHistogram) {
  const SpecDecodeCounters before = counters_of(kRillBefore), after = counters_of(kRillAfter);
  EXPECT_EQ(before.drafts, 10);
  EXPECT_EQ(before.draft_tokens, 40);
  EXPECT_EQ(before.accepted_tokens, 24);
  // Draft i is accepted by the steps that emitted >= i + 2 tokens: 8 (not the two 1s), 7, 5, 4; they add up
  // to the accepted counter.
  EXPECT_EQ(before.accepted_per_position, (std::vector<double>{8, 7, 5, 4}));

  const SpecDecodeStats s = spec_decode_delta(before, after);
  EXPECT_EQ(s.drafts, 5);
  EXPECT_EQ(s.draft_tokens, 20);
  EXPECT_EQ(s.accepted_tokens, 11);
  EXPECT_DOUBLE_EQ(*s.acceptance_rate, 55.0);   // 11 / 20
  EXPECT_DOUBLE_EQ(*s.acceptance_length, 3.2);  // 1 + 11 / 5: the new steps emitted 16 tokens in 5 steps
  // The new steps emitted 1, 5, 5, 3, 2 tokens: position 0 accepted by 4 of 5, position 1 by 3 (5, 5, 3),
  // positions 2 and 3 by the two 5s.
  ASSERT_EQ(s.per_position.size(), 4u);
  const double expected[] = {0.8, 0.6, 0.4, 0.4};
  for (size_t i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(s.per_position[i], expected[i]) << i;
}

TEST(SpecDecodeStats, VllmNamesSummedOverLabelSets) {
  // vLLM's counters with a per-position counter, from two engines (label sets), which are summed.
  const char* before = R"(vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 4
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 6
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 12
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 18
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 5
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 9
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 3
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 5
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 2
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 3
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="2"} 1
)";
  const char* after = R"(vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 14
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 16
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 42
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 48
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 20
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 24
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 10
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 14
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 7
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 9
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 3
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="2"} 4
)";
  const SpecDecodeStats s = spec_decode_delta(counters_of(before), counters_of(after));
  EXPECT_EQ(s.drafts, 20);           // (14 + 16) - (4 + 6)
  EXPECT_EQ(s.draft_tokens, 60);     // 90 - 30
  EXPECT_EQ(s.accepted_tokens, 30);  // 44 - 14
  EXPECT_DOUBLE_EQ(*s.acceptance_rate, 50.0);
  EXPECT_DOUBLE_EQ(*s.acceptance_length, 2.5);
  ASSERT_EQ(s.per_position.size(), 3u);
  EXPECT_DOUBLE_EQ(s.per_position[0], 16.0 / 20);  // 24 - 8
  EXPECT_DOUBLE_EQ(s.per_position[1], 11.0 / 20);  // 16 - 5
  EXPECT_DOUBLE_EQ(s.per_position[2], 6.0 / 20);   // 7 - 1
}

TEST(SpecDecodeStats, AbsentPartialAndIdle) {
  // No counters (speculation off): nothing to report. One of the three missing: still nothing.
  auto none = parse_prometheus_text("rill:generation_tokens_total{model_name=\"demo\"} 5\n");
  EXPECT_FALSE(read_spec_decode_counters(*none).has_value());
  auto partial = parse_prometheus_text(
      "rill:spec_decode_num_drafts_total 1\nrill:spec_decode_num_draft_tokens_total 4\n");
  EXPECT_FALSE(read_spec_decode_counters(*partial).has_value());

  // Counters without a histogram: the totals, no per-position rates.
  auto bare = parse_prometheus_text(
      "rill:spec_decode_num_drafts_total 2\nrill:spec_decode_num_draft_tokens_total 8\n"
      "rill:spec_decode_num_accepted_tokens_total 3\n");
  const auto c = read_spec_decode_counters(*bare);
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(c->accepted_per_position.empty());
  const SpecDecodeStats first = spec_decode_delta(std::nullopt, *c);  // counted from zero
  EXPECT_EQ(first.drafts, 2);
  EXPECT_DOUBLE_EQ(*first.acceptance_rate, 37.5);
  EXPECT_DOUBLE_EQ(*first.acceptance_length, 2.5);

  // Nothing drafted during the run: zero counts, no rate or length to divide out.
  const SpecDecodeStats idle = spec_decode_delta(*c, *c);
  EXPECT_EQ(idle.drafts, 0);
  EXPECT_EQ(idle.draft_tokens, 0);
  EXPECT_FALSE(idle.acceptance_rate.has_value());
  EXPECT_FALSE(idle.acceptance_length.has_value());

  // The server restarted between the scrapes (counters went down): counted from zero.
  SpecDecodeCounters restarted{1, 4, 2, {}};
  const SpecDecodeStats after_restart = spec_decode_delta(*c, restarted);
  EXPECT_EQ(after_restart.drafts, 1);
  EXPECT_EQ(after_restart.accepted_tokens, 2);
}

TEST(SpecDecodeStats, ReportSectionAndJsonKeys) {
  LoadResult load;
  load.duration_s = 1;
  RunConfig config;
  ServeMetrics m = compute_metrics(load, config);
  EXPECT_EQ(format_report(m, config).find("Speculative Decoding"), std::string::npos);  // off: no section
  EXPECT_FALSE(result_json(m, config, load).contains("spec_decode_num_drafts"));

  m.spec_decode = spec_decode_delta(counters_of(kRillBefore), counters_of(kRillAfter));
  const std::string table = format_report(m, config);
  for (const char* line :
       {"-------------Speculative Decoding-------------", "Acceptance rate (%):                     55.00",
        "Acceptance length:                       3.20", "Drafts:                                  5",
        "Draft tokens:                            20", "Accepted tokens:                         11",
        "Per-position acceptance (%):", "  Position 0:                            80.00",
        "  Position 3:                            40.00"})
    EXPECT_NE(table.find(line), std::string::npos) << line << "\n" << table;
  const auto j = result_json(m, config, load);
  EXPECT_DOUBLE_EQ(j["spec_decode_acceptance_rate"].get<double>(), 55.0);
  EXPECT_DOUBLE_EQ(j["spec_decode_acceptance_length"].get<double>(), 3.2);
  EXPECT_EQ(j["spec_decode_num_drafts"], 5);
  EXPECT_EQ(j["spec_decode_draft_tokens"], 20);
  EXPECT_EQ(j["spec_decode_accepted_tokens"], 11);
  EXPECT_EQ(j["spec_decode_per_position_acceptance_rates"].size(), 4u);

  m.spec_decode = SpecDecodeStats{};  // on, but nothing drafted in the run
  EXPECT_NE(format_report(m, config).find("Acceptance rate (%):                     n/a"), std::string::npos);
  EXPECT_TRUE(result_json(m, config, load)["spec_decode_acceptance_rate"].is_null());
}

}  // namespace
}  // namespace rill::bench::serve
