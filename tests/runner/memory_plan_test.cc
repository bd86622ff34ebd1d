// plan_memory against the memory the backend has (issue #14 item 8): a cache plan set by the flags that
// cannot fit is refused before allocating, naming what it needs, what is available and the flags that size
// it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "runner/memory_plan.h"
#include "model/kimi_linear_48b_config.h"

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
