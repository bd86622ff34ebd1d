// Metrics of hand-made records: throughputs, vLLM's TPOT ((E2EL - TTFT) / (tokens - 1)), goodput, failures.
#include <gtest/gtest.h>

#include "bench/serve/serve_report.h"

namespace rill::bench::serve {
namespace {

RequestRecord ok_record(double ttft, double latency, int64_t in, int64_t out, std::vector<double> itl) {
  RequestRecord r;
  r.ok = true;
  r.ttft_s = ttft;
  r.latency_s = latency;
  r.prompt_tokens = in;
  r.completion_tokens = out;
  r.itl_s = std::move(itl);
  return r;
}

TEST(ServeReport, MetricsOfKnownRecords) {
  LoadResult load;
  load.duration_s = 2.0;
  load.records.push_back(ok_record(0.1, 1.1, 10, 11, {0.1, 0.1}));  // TPOT (1.1 - 0.1) / 10 = 100 ms
  load.records.push_back(ok_record(0.3, 0.7, 20, 3, {0.2, 0.2}));   // TPOT 0.4 / 2 = 200 ms
  load.records.push_back(ok_record(0.2, 0.2, 30, 1, {}));           // one token: no TPOT
  RequestRecord failed;
  failed.error = "HTTP 400";
  load.records.push_back(failed);
  RunConfig config;
  config.percentiles = {50, 100};
  config.goodput_ms = {{"ttft", 250}, {"tpot", 150}};  // the first and the third meet both
  const ServeMetrics m = compute_metrics(load, config);
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 60);
  EXPECT_EQ(m.total_output, 15);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(m.output_throughput, 7.5);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 37.5);
  EXPECT_DOUBLE_EQ(m.request_goodput, 1.0);
  EXPECT_NEAR(m.tpot_ms.mean, 150, 1e-9);
  EXPECT_NEAR(m.tpot_ms.percentiles[1], 200, 1e-9);
  EXPECT_NEAR(m.ttft_ms.median, 200, 1e-9);
  EXPECT_NEAR(m.itl_ms.mean, 150, 1e-9);
  EXPECT_NEAR(m.e2el_ms.percentiles[1], 1100, 1e-9);

  const std::string table = format_report(m, config);
  EXPECT_NE(table.find("Successful requests:                     3"), std::string::npos) << table;
  EXPECT_NE(table.find("Request goodput (req/s):                 1.00"), std::string::npos) << table;
  EXPECT_NE(table.find("P100 TPOT (ms):"), std::string::npos) << table;
  const auto j = result_json(m, config, load);
  EXPECT_EQ(j["completed"], 3);
  EXPECT_EQ(j["output_lens"], nlohmann::ordered_json::parse("[11, 3, 1, 0]"));
  EXPECT_EQ(j["errors"][3], "HTTP 400");
  EXPECT_NEAR(j["p50_ttft_ms"].get<double>(), 200, 1e-9);

  // The plot's point, read back from the result JSON (as --plot-from reads a saved file).
  auto point = plot_point(j, percentile_key(100));
  ASSERT_TRUE(point.ok()) << point.status().to_string();
  EXPECT_DOUBLE_EQ(point->achieved_rate, 1.5);
  EXPECT_NEAR(point->ttft_mean_ms, 200, 1e-9);
  EXPECT_NEAR(point->ttft_tail_ms, 300, 1e-9);
  EXPECT_NEAR(point->tpot_tail_ms, 200, 1e-9);
  auto missing = plot_point(j, "p99");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("p99_ttft_ms"), std::string::npos) << missing.status().message();
}

}  // namespace
}  // namespace rill::bench::serve
