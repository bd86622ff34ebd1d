// Tensor, expert and pipeline parallelism on the CPU (issue #17): a fresh random checkpoint of each family,
// split over 2 to 4 ranks that are threads (the thread communicator) — pipeline stages mid AttnRes block and on
// its boundary for K3 — gives logits within 1e-5 relative of the single-rank
// run at every prefill and decode position, and the same greedy tokens. The configs have 4 KDA and 4 MLA heads
// and widths that every mapping divides (K3's MXFP4 experts in whole 32-column scale groups). Also: a mapping
// that does not divide is refused naming the dimension, and a rank that fails ends the others' waits with an
// error naming it.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "backend/cpu/comm/thread_communicator.h"
#include "io/checkpoint.h"
#include "model/fixture.h"
#include "model/k3_checkpoint.h"
#include "model/random_checkpoint.h"
#include "model/sharded_run.h"
#include "test_seed.h"

namespace rill {
namespace {

using testing::RankFactory;
using testing::RankSetup;

// A world of threads on the CPU backend; each rank's tp group gets a thread communicator.
RankFactory cpu_ranks(std::shared_ptr<backend::ThreadCommHub> hub) {
  return [hub](const dist::Mapping& m) -> Result<RankSetup> {
    RankSetup s;
    s.be = backend::make_cpu_backend();
    if (m.tp_size() > 1) {
      RILL_ASSIGN_OR_RETURN(s.tp_comm, hub->communicator(m.rank(), m.group(dist::GroupKind::Tp)));
    }
    if (m.pp_size() > 1) {
      RILL_ASSIGN_OR_RETURN(s.pp_comm, hub->communicator(m.rank(), m.group(dist::GroupKind::Pp)));
    }
    return s;
  };
}

class ShardedModel : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    family_ = &testing::kShardFamilies[GetParam()];
    seed_ = rill::testing::test_seed();
    dir_ = std::make_unique<testing::TempDir>(std::string("sharded_") + family_->name);
    ASSERT_TRUE(model::write_random_checkpoint(dir_->path(), family_->config(), seed_, 2).ok());
    std::mt19937 rng(seed_);
    prompt_.resize(90);  // one full 64-token KDA chunk and a partial one, fed in chunks of 40
    for (auto& t : prompt_) t = int32_t(rng() % 500) + 3;
    auto hub = backend::ThreadCommHub::make(1);
    reference_ = testing::run_one_rank(cpu_ranks(hub), *dist::Mapping::make({}, 0), dir_->path(), prompt_,
                                       kChunk, kDecode);
    ASSERT_TRUE(reference_.status.ok()) << reference_.status.to_string();
  }

  static constexpr int kChunk = 40, kDecode = 6;
  const testing::ShardFamily* family_ = nullptr;
  uint32_t seed_ = 0;
  std::unique_ptr<testing::TempDir> dir_;
  std::vector<int32_t> prompt_;
  testing::ShardedRun reference_;
};

TEST_P(ShardedModel, EveryMappingMatchesOneRank) {
  SCOPED_TRACE(std::string(family_->name) + " RILL_TEST_SEED=" + std::to_string(seed_));
  const dist::ParallelSizes mappings[] = {
      {.world = 2, .tp = 2},         {.world = 4, .tp = 4},         {.world = 2, .tp = 2, .ep = 2},
      {.world = 4, .tp = 4, .ep = 4}, {.world = 4, .tp = 4, .ep = 2}, {.world = 2, .pp = 2},
      {.world = 3, .pp = 3},          {.world = 4, .tp = 2, .pp = 2}, {.world = 4, .tp = 2, .ep = 2, .pp = 2},
  };
  for (const dist::ParallelSizes& sizes : mappings) {
    SCOPED_TRACE("tp " + std::to_string(sizes.tp) + " ep " + std::to_string(sizes.ep) + " pp " +
                 std::to_string(sizes.pp));
    auto hub = backend::ThreadCommHub::make(sizes.world);
    const auto runs = testing::run_sharded(sizes, cpu_ranks(hub), dir_->path(), prompt_, kChunk, kDecode,
                                           [&](int r, const Status& s) { hub->fail(r, s.to_string()); });
    for (int r = 0; r < sizes.world; ++r) {
      const testing::ShardedRun& run = runs[size_t(r)];
      ASSERT_TRUE(run.status.ok()) << "rank " << r << ": " << run.status.to_string();
      ASSERT_EQ(run.logits.size(), reference_.logits.size());
      // Logits exist on the first pipeline stage (which samples) and the last (which computes them).
      const int stage = dist::Mapping::make(sizes, r)->pp_rank();
      if (stage != 0 && stage != sizes.pp - 1) continue;
      EXPECT_LE(testing::relative_max_diff(run.logits, reference_.logits), 1e-5) << "rank " << r;
      EXPECT_EQ(run.tokens, reference_.tokens) << "rank " << r;
    }
  }
}

TEST_P(ShardedModel, AMappingThatDoesNotDivideIsRefused) {
  auto hub = backend::ThreadCommHub::make(3);
  const auto runs = testing::run_sharded({.world = 3, .tp = 3}, cpu_ranks(hub), dir_->path(), prompt_, kChunk,
                                         1, [&](int r, const Status& s) { hub->fail(r, s.to_string()); });
  for (const auto& run : runs) {
    ASSERT_FALSE(run.status.ok());
    EXPECT_NE(run.status.message().find("not divisible by --tensor-parallel-size 3"), std::string::npos)
        << run.status.to_string();
  }
}

TEST_P(ShardedModel, AFailedRankIsNamedByTheOthers) {
  backend::ThreadCommOptions options;
  options.timeout = std::chrono::milliseconds(20000);
  auto hub = backend::ThreadCommHub::make(2, options);
  const RankFactory cpu = cpu_ranks(hub);
  const RankFactory second_fails = [&](const dist::Mapping& m) -> Result<RankSetup> {
    if (m.rank() == 1) return invalid_argument("rank 1 could not open its slice (injected)");
    return cpu(m);
  };
  const auto runs = testing::run_sharded({.world = 2, .tp = 2}, second_fails, dir_->path(), prompt_, kChunk, 1,
                                         [&](int r, const Status& s) { hub->fail(r, s.to_string()); });
  ASSERT_FALSE(runs[0].status.ok());
  EXPECT_NE(runs[0].status.message().find("rank 1"), std::string::npos) << runs[0].status.to_string();
  EXPECT_NE(runs[0].status.message().find("injected"), std::string::npos) << runs[0].status.to_string();
}

INSTANTIATE_TEST_SUITE_P(Families, ShardedModel, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& i) { return std::string(testing::kShardFamilies[i.param].name); });

}  // namespace
}  // namespace rill
