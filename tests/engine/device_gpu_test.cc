// The engine on the device a backend names (--device cuda:N): the engine thread binds the backend's device, so a
// model created on cuda:1 from the main thread runs its steps there. Greedy tokens on cuda:1 equal cuda:0's (same
// kernels, same inputs). Skipped with fewer than two GPUs (the missing-device error is tested in tests/cli).
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "engine/engine.h"
#include "model/fixture.h"
#include "model/model.h"

namespace rill::engine {
namespace {

std::vector<int32_t> greedy_on(const std::string& device, const std::vector<int32_t>& prompt) {
  auto be = backend::make_backend(device);
  EXPECT_TRUE(be.ok()) << be.status().to_string();
  if (!be.ok()) return {};
  auto m = model::load_model(testing::data_dir() / "kimi_linear_tiny_b", **be);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return {};
  auto e = Engine::create(std::move(m).value(), nullptr, EngineOptions{.max_batch_size = 2, .max_num_tokens = 256});
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return {};
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 16;
  p.ignore_eos = true;
  std::vector<int32_t> out;
  auto s = (*e)->submit({prompt, p});
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  StreamEvent ev;
  while (s.ok() && (*s)->next(&ev, std::chrono::seconds(120))) {
    out.insert(out.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finish) {
      EXPECT_EQ(*ev.finish, FinishReason::Length) << ev.error.to_string();
      break;
    }
  }
  (*e)->shutdown(false);
  return out;
}

TEST(EngineDevice, RunsOnTheBackendsDevice) {
  if (!backend::make_backend("cuda:0").ok()) GTEST_SKIP() << "no CUDA GPU";
  if (!backend::make_backend("cuda:1").ok()) GTEST_SKIP() << "one GPU: the second-device case needs two";
  std::mt19937 rng(5);
  std::vector<int32_t> prompt(40);
  for (auto& x : prompt) x = int32_t(3 + rng() % 500);
  const std::vector<int32_t> on0 = greedy_on("cuda:0", prompt), on1 = greedy_on("cuda:1", prompt);
  ASSERT_EQ(on0.size(), 16u);
  EXPECT_EQ(on1, on0);
}

}  // namespace
}  // namespace rill::engine
