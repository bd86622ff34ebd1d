// `rill bench`'s whole-model steps (bench/driver/model_bench) on the CPU backend at the tiny fixture's shape:
// the rows it promises are there, and speculative decoding's verify steps (k + 1 tokens per sequence, logits
// at each, sampled) run beside a plain decode step of their batch (issue #21's verify-cost table).
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>

#include "backend/backend.h"
#include "bench/driver/model_bench.h"
#include "model/config.h"
#include "model/fixture.h"

namespace rill::testing {
namespace {

TEST(ModelBench, VerifyRowsBesideTheDecodeStepOfTheirBatch) {
  auto be = backend::make_cpu_backend();
  auto cfg = model::ModelConfig::load(data_dir() / "kimi_linear_tiny_a");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto m = model::load_dummy_model(*cfg, *be, 7);
  ASSERT_TRUE(m.ok()) << m.status().message();
  bench::BenchOptions o;
  o.decode_batches = {1, 2};
  o.decode_context = 70;  // past one 64-token MLA block: the verify tokens cross into the next
  o.prefill_long = 40;
  o.prefill_batch = 2;
  o.prefill_short = 16;
  o.repeats = 1;
  o.verify_drafts = {1, 4};
  o.verify_batches = {1, 3};  // 3: a batch the decode rows do not have
  auto rows = bench::bench_model(**m, o);
  ASSERT_TRUE(rows.ok()) << rows.status().message();

  std::map<std::string, const bench::BenchRow*> by_name;
  for (const bench::BenchRow& r : *rows) by_name[r.section + ": " + r.name] = &r;
  for (const char* name : {"prefill: 1 x 40 tokens", "prefill: 2 x 16 tokens", "decode: batch 1 at 70 context",
                           "decode: batch 2 at 70 context"})
    EXPECT_TRUE(by_name.count(name)) << name;
  for (int batch : o.verify_batches) {
    double previous_bytes = 0;
    for (int k : o.verify_drafts) {
      const std::string name = "verify: k = " + std::to_string(k) + ", batch " + std::to_string(batch) + " at 70 context";
      ASSERT_TRUE(by_name.count(name)) << name;
      const bench::BenchRow& r = *by_name[name];
      EXPECT_GT(r.ms, 0.0) << name;
      EXPECT_NE(r.note.find("x the eager decode step"), std::string::npos) << r.note;  // no graphs on the CPU
      // The oracle bound is (k + 1) decode steps' time over the verify step's, from the numbers beside it.
      double ratio = 0, base_ms = 0, bound = 0;
      ASSERT_EQ(std::sscanf(r.note.c_str(), "%lfx the eager decode step (%lf ms); oracle bound %lfx", &ratio,
                            &base_ms, &bound),
                3)
          << r.note;
      // (printed to 2 decimals, from a base printed to 3)
      EXPECT_NEAR(bound, (k + 1) * base_ms / r.ms, 0.006 + (k + 1) * 0.0006 / r.ms) << r.note;
      // More drafts read at least as many distinct experts; state and KV are counted once per sequence.
      EXPECT_GE(r.bytes, previous_bytes) << name;
      previous_bytes = r.bytes;
    }
  }
  EXPECT_EQ(by_name.count("verify: k = 1, batch 2 at 70 context"), 0u);  // only the asked-for batches
}

}  // namespace
}  // namespace rill::testing
