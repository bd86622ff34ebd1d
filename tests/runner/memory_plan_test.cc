// plan_memory against the memory the backend has (issue #14 item 8): a cache plan set by the flags that
// cannot fit is refused before allocating, naming what it needs, what is available and the flags that size
// it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "model/kimi_linear_48b_config.h"
#include "runner/memory_plan.h"

namespace rill::runner {
namespace {

model::ModelConfig kimi_linear_48b() {
  return *model::ModelConfig::from_json(nlohmann::ordered_json::parse(kKimiLinear48bConfig), "48b");
}

TEST(MemoryPlan, APlanLargerThanTheAvailableMemoryIsRefusedWithTheFlags) {
  auto be = backend::make_cpu_backend();
  const model::ModelConfig c = kimi_linear_48b();
  // 4096 sequence slots of Kimi Linear 48B's fp32 KDA state: 20 layers x 32 heads x 128 x 128 x 4 B = 40 MiB
  // each, 160 GiB in all before the conv windows and the KV blocks.
  const double state_lower_bound = 4096.0 * 20 * 32 * 128 * 128 * 4;
  const std::optional<size_t> available = be->available_memory();
  ASSERT_TRUE(available.has_value());
  if (double(*available) >= state_lower_bound) GTEST_SKIP() << "this machine has 160 GiB available";
  auto plan = plan_memory(*be, c, 4096, 1 << 24, 0.9, 0, 64, {});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::ResourceExhausted) << plan.status().to_string();
  const std::string& msg = plan.status().message();
  EXPECT_NE(msg.find("the caches (4096 sequence slots"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--max-batch-size, --max-model-len, --num-kv-blocks"), std::string::npos) << msg;
  EXPECT_NE(msg.find(" available on cpu"), std::string::npos) << msg;
  const double needed_gib = std::atof(msg.c_str() + msg.find("): ") + 3);
  EXPECT_GE(needed_gib, 160.0) << msg;
  EXPECT_NE(msg.find("GiB needed"), std::string::npos) << msg;

  // The same model with a modest plan fits (a few GiB: 4 slots, 4096 tokens).
  EXPECT_TRUE(plan_memory(*be, c, 4, 4096, 0.9, 0, 64, {}).ok());
}

// Speculative decoding's rollback storage: a checkpoint state slot per sequence slot, or with kda_rollback
// "records" replay records of k + 1 tokens instead — at the 48B shape (20 KDA layers, 32 heads of 128, 3 x 128
// fp32 per head and token, plus the bf16 pre-conv row of 3 x 4096) 8.5x smaller than a checkpoint at k = 4.
TEST(MemoryPlan, ReplayRecordsReplaceCheckpointSlots) {
  auto be = backend::make_cpu_backend();
  const model::ModelConfig c = kimi_linear_48b();
  auto ckpt = plan_memory(*be, c, 4, 4096, 0.9, 64, 64, {}, 0, true);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->n_checkpoints, 4);
  EXPECT_EQ(ckpt->n_record_slots, 0);
  auto rec = plan_memory(*be, c, 4, 4096, 0.9, 64, 64, {}, 0, true, cache::KdaRollback::Records, 5);
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  EXPECT_EQ(rec->n_checkpoints, 0);
  EXPECT_EQ(rec->checkpoint_bytes, 0);
  EXPECT_EQ(rec->n_record_slots, 4);
  EXPECT_EQ(rec->record_tokens, 5);
  // The CPU's activations are fp32: the pre-conv rows take 4 bytes a value there (2 on the GPU).
  const int64_t per_layer = 4 * 5 * (32 * 3 * 128 * 4 + 3 * 4096 * 4);
  EXPECT_EQ(rec->record_bytes, 20 * per_layer + 256);  // + the fold's slot and count arrays
  EXPECT_LT(rec->record_bytes * 4, ckpt->checkpoint_bytes);  // 4.5x with fp32 rows, 8.5x with bf16
  EXPECT_NE(rec->describe().find("KDA replay records of 5 tokens"), std::string::npos) << rec->describe();
  EXPECT_EQ(rec->describe().find("checkpoint"), std::string::npos) << rec->describe();
  EXPECT_FALSE(plan_memory(*be, c, 4, 4096, 0.9, 64, 64, {}, 0, true, cache::KdaRollback::Records, 1).ok());
}

// --gpu-memory-utilization with vLLM's meaning: the process holds at most U x total, so the caches get
// U x total less what is in use (total - free); --kv-cache-fraction is a share of the free memory.
TEST(MemoryPlan, GpuMemoryUtilizationBudgetsTheDeviceTotal) {
  const size_t GiB = size_t(1) << 30;
  // 80 GiB device, 30 GiB in use (weights + workspace): U = 0.9 leaves 72 - 30 = 42 GiB.
  auto b = cache_memory_budget(50 * GiB, 80 * GiB, 0.9, 0.5);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_DOUBLE_EQ(*b, 42.0 * double(GiB));
  // Unset: the fraction of the free memory.
  b = cache_memory_budget(50 * GiB, 80 * GiB, 0, 0.5);
  ASSERT_TRUE(b.ok());
  EXPECT_DOUBLE_EQ(*b, 25.0 * double(GiB));
  // U = 1: every free byte.
  b = cache_memory_budget(50 * GiB, 80 * GiB, 1.0, 0.5);
  ASSERT_TRUE(b.ok());
  EXPECT_DOUBLE_EQ(*b, 50.0 * double(GiB));
  // 0.3 x 80 = 24 GiB is less than the 30 in use: refused with the numbers.
  b = cache_memory_budget(50 * GiB, 80 * GiB, 0.3, 0.5);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::ResourceExhausted);
  const std::string& msg = b.status().message();
  for (const char* part : {"--gpu-memory-utilization 0.3", "24.00 GiB", "80.00 GiB", "30.00 GiB", "raise it"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
  EXPECT_EQ(cache_memory_budget(50 * GiB, 80 * GiB, 1.5, 0.5).status().code(), StatusCode::InvalidArgument);
  EXPECT_EQ(cache_memory_budget(50 * GiB, 80 * GiB, 0, 0).status().code(), StatusCode::InvalidArgument);
}

// MemAvailable is at most the machine's physical memory (sysconf, an independent source) and not zero.
TEST(MemoryPlan, CpuAvailableMemoryIsMemAvailable) {
  auto be = backend::make_cpu_backend();
  const std::optional<size_t> available = be->available_memory();
  ASSERT_TRUE(available.has_value());
  const double physical = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  EXPECT_GT(*available, 0u);
  EXPECT_LE(double(*available), physical);
}

}  // namespace
}  // namespace rill::runner
