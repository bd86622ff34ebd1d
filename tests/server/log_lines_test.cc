// The request log line and the stats line (request_log.h, stats_logger.h): the numbers they print are the
// counters' differences over the interval and vLLM's TPOT, computed here by hand.
#include <gtest/gtest.h>

#include "server/request_log.h"
#include "server/stats_logger.h"

namespace rill::server {
namespace {

TEST(RequestLog, PrintsTheCountsAndVllmsTpot) {
  FinishedRequest r{"chatcmpl-x", 1, 200, "length", 12, 4, 11, 0.5, 2.5};
  // TPOT: (e2e - ttft) / (completion - 1) = 2.0 / 10.
  EXPECT_EQ(format_finished_request(r),
            "request chatcmpl-x finished: choice=1 status=200 finish=length prompt_tokens=12 cached_tokens=4 "
            "completion_tokens=11 ttft=0.500s tpot=0.2000s e2e=2.500s");
  r.completion_tokens = 1;  // no gap between tokens: no TPOT
  EXPECT_NE(format_finished_request(r).find("tpot=- "), std::string::npos);
  r.ttft_s = -1;  // no token at all
  EXPECT_NE(format_finished_request(r).find("ttft=- tpot=- "), std::string::npos);
  r.cached_tokens = -1;  // aborted before the engine reported it: unknown, not -1
  EXPECT_NE(format_finished_request(r).find(" cached_tokens=- "), std::string::npos);
  r.method = "POST";
  r.path = "/v1/completions";
  EXPECT_TRUE(format_finished_request(r).ends_with(" method=POST path=/v1/completions"));
  r.client = "[::1]:51234";
  EXPECT_TRUE(format_finished_request(r).ends_with(" method=POST path=/v1/completions client=[::1]:51234"));
}

TEST(StatsLine, ThroughputIsTheCountersDeltaOverTheInterval) {
  engine::EngineStats a, b;
  a.prompt_tokens_total = 1000;
  a.generation_tokens_total = 50;
  a.prefix_cache_queries = 100;
  a.prefix_cache_hits = 10;
  b = a;
  b.prompt_tokens_total += 300;  // 300 in 2 s
  b.generation_tokens_total += 41;
  b.prefix_cache_queries += 400;  // 100 of 400 found: 25%
  b.prefix_cache_hits += 100;
  b.running = 3;
  b.waiting = 2;
  b.kv_blocks_used = 16;
  b.kv_blocks_total = 64;
  b.state_slots_used = 3;
  b.state_slots_total = 8;
  EXPECT_EQ(format_stats_line(a, b, 2.0),
            "stats: prompt throughput 150.0 tokens/s, generation throughput 20.5 tokens/s (300 prompt + 41 "
            "generated tokens in 2.00 s), running 3, waiting 2, KV blocks 16/64 (25.0%), state slots 3/8 "
            "(37.5%), prefix cache hit rate 25.0%");
  b.prefix_cache_queries = a.prefix_cache_queries;  // no lookups in the interval: no rate
  EXPECT_NE(format_stats_line(a, b, 2.0).find("prefix cache hit rate -"), std::string::npos);
}

}  // namespace
}  // namespace rill::server
