// Prefix caching on the CUDA backend, where the chunk recurrence writes the KDA snapshots inside a prefill
// step: a prompt sharing a prefix with an earlier one resumes from the deepest snapshot and gives the logits
// of the same prompt computed with caching off. Skipped where no GPU is present. (Soundness in every other
// situation — mid-block prefixes, multi-turn, eviction, preemption — is tested on the CPU:
// prefix_cache_test.cc.)
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>
#include <random>

#include "engine/engine.h"
#include "engine/logged_engine.h"
#include "model/fixture.h"
#include "model/model.h"
#include "test_seed.h"

namespace rill::engine {
namespace {

using rill::testing::rel_l2;

// Both runs compute with the same 64-token chunk boundaries (snapshots sit on them), so they differ only by
// the GEMM shapes cuBLASLt picks per step: measured well under 1e-3. A state restored from the wrong position
// or a snapshot not written moves the logits by order 1.
constexpr double kRelL2 = 1e-2;

struct Outcome {
  std::vector<float> logits;  // the first sampled position
  int cached = -1;
};

// The tiny Kimi Linear on the GPU; run() answers a prompt's first sampled row.
class GpuEngine {
 public:
  explicit GpuEngine(EngineOptions o)
      : e_(testing::cuda_backend_or_null(), testing::data_dir() / "kimi_linear_tiny_b", std::move(o)) {}
  bool ok() const { return e_.ok(); }
  Engine& engine() { return e_.engine(); }

  Outcome run(const std::vector<int32_t>& prompt) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 1;
    p.ignore_eos = true;
    auto s = e_.engine().submit({prompt, p});
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    Outcome r;
    StreamEvent ev;
    while ((*s)->next(&ev, std::chrono::seconds(120)))
      if (ev.finish) {
        EXPECT_EQ(*ev.finish, FinishReason::Length);
        r.cached = ev.cached_tokens;
        const auto rows = e_.logits((*s)->id());
        if (!rows.empty()) r.logits = rows.front();
        return r;
      }
    ADD_FAILURE() << "request timed out";
    return r;
  }

 private:
  testing::LoggedEngine e_;
};

TEST(PrefixCacheGpu, SnapshotsTakenInsideOneStepResumeExactly) {
  EngineOptions on_opts{.max_batch_size = 4, .max_num_tokens = 512};
  on_opts.enable_prefix_caching = true;
  on_opts.kda_snapshot_interval = 64;
  GpuEngine on(on_opts);
  if (!on.ok()) GTEST_SKIP() << "no CUDA backend";
  GpuEngine off(EngineOptions{.max_batch_size = 1, .max_num_tokens = 1024});
  ASSERT_TRUE(off.ok());

  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  // 300 tokens in one 512-token step: snapshots after 64, 128, 192 and 256 are written inside the step.
  const auto first = testing::random_tokens(rng, 300);
  const Outcome r0 = on.run(first);
  EXPECT_EQ(r0.cached, 0);
  EXPECT_LE(rel_l2(r0.logits, off.run(first).logits), kRelL2) << "the first prompt";
  for (const auto& [shared, want_cached] :
       std::vector<std::pair<int, int>>{{130, 128}, {200, 192}, {299, 256}}) {
    auto p = std::vector<int32_t>(first.begin(), first.begin() + shared);
    const auto tail = testing::random_tokens(rng, 50);
    p.insert(p.end(), tail.begin(), tail.end());
    p[size_t(shared)] = first[size_t(shared)] == 3 ? 4 : 3;  // differs right after the shared part
    const Outcome r = on.run(p);
    EXPECT_EQ(r.cached, want_cached) << "sharing " << shared;
    const double e = rel_l2(r.logits, off.run(p).logits);
    EXPECT_LE(e, kRelL2) << "sharing " << shared;
    std::printf("[ prefix   ] sharing %d tokens, %d cached: rel L2 %.2e vs caching off\n", shared, r.cached,
                e);
  }
}

// Host tier on CUDA (pinned pool, copies on their own stream): a prompt whose blocks and snapshots were all
// pushed to the host (Engine::offload_prefix_cache) resumes from them, and prompts sharing a part of it too.
TEST(PrefixCacheGpu, PromptsBroughtBackFromTheHostTierResumeExactly) {
  EngineOptions on_opts{.max_batch_size = 4, .max_num_tokens = 512};
  on_opts.enable_prefix_caching = true;
  on_opts.kda_snapshot_interval = 64;
  on_opts.kv_offloading_gib = 0.05;
  GpuEngine on(on_opts);
  if (!on.ok()) GTEST_SKIP() << "no CUDA backend";
  GpuEngine off(EngineOptions{.max_batch_size = 1, .max_num_tokens = 1024});
  ASSERT_TRUE(off.ok());
  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  const auto first = testing::random_tokens(rng, 300);
  EXPECT_EQ(on.run(first).cached, 0);
  for (const auto& [shared, want_cached] :
       std::vector<std::pair<int, int>>{{300, 256}, {130, 128}, {200, 192}}) {
    ASSERT_TRUE(on.engine().offload_prefix_cache().ok());
    auto p = std::vector<int32_t>(first.begin(), first.begin() + shared);
    if (shared < 300) {
      const auto tail = testing::random_tokens(rng, 50);
      p.insert(p.end(), tail.begin(), tail.end());
      p[size_t(shared)] = first[size_t(shared)] == 3 ? 4 : 3;
    }
    const Outcome r = on.run(p);
    EXPECT_EQ(r.cached, want_cached) << "sharing " << shared;
    const double e = rel_l2(r.logits, off.run(p).logits);
    EXPECT_LE(e, kRelL2) << "sharing " << shared;
    std::printf("[ host     ] sharing %d tokens, %d cached from the host tier: rel L2 %.2e vs caching off\n",
                shared, r.cached, e);
  }
  EXPECT_GT(on.engine().stats().prefix_cache_hits_host, 0u);
}

}  // namespace
}  // namespace rill::engine
