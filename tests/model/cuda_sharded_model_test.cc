// The sharded CUDA path on one GPU (issue #17): TP 2/4 and EP 2/4 with every rank on the same device (the
// shared-device communicator) against TP 1 on that device, within the model tests' bf16 bounds
// (logit_compare.h), at every prefill and decode position; decode feeds TP 1's greedy tokens and every step
// replays TP 1's routing (sharded_run.h's Replay), so both compute the same function. Skips without a GPU.
#include <gtest/gtest.h>

#include <random>

#include "backend/comm_world.h"
#include "model/logit_compare.h"
#include "model/random_checkpoint.h"
#include "model/sharded_run.h"
#include "test_seed.h"

namespace rill {
namespace {

using testing::RankFactory;
using testing::RankSetup;

RankFactory gpu_ranks(backend::CommWorld* world) {
  return [world](const dist::Mapping& m) -> Result<RankSetup> {
    RankSetup s;
    RILL_ASSIGN_OR_RETURN(s.be, world->make_backend(m.rank()));
    if (m.tp_size() > 1) {
      RILL_ASSIGN_OR_RETURN(s.tp_comm, world->communicator(m.rank(), m.group(dist::GroupKind::Tp), *s.be));
    }
    if (m.pp_size() > 1) {
      RILL_ASSIGN_OR_RETURN(s.pp_comm, world->communicator(m.rank(), m.group(dist::GroupKind::Pp), *s.be));
    }
    return s;
  };
}

class CudaShardedModel : public ::testing::TestWithParam<int> {};

TEST_P(CudaShardedModel, RanksSharingOneGpuMatchOneRank) {
  const testing::ShardFamily& family = testing::kShardFamilies[GetParam()];
  if (!backend::make_backend("cuda").ok()) GTEST_SKIP() << "no usable CUDA GPU";
  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE(std::string(family.name) + " RILL_TEST_SEED=" + std::to_string(seed));
  testing::TempDir dir(std::string("cuda_sharded_") + family.name);
  ASSERT_TRUE(model::write_random_checkpoint(dir.path(), family.config(), seed, 2).ok());
  std::mt19937 rng(seed);
  std::vector<int32_t> prompt(90);
  for (auto& t : prompt) t = int32_t(rng() % 500) + 3;
  constexpr int kChunk = 40, kDecode = 6;
  auto one = backend::CommWorld::make(1, {backend::CommKind::SharedGpu});
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  const testing::ShardedRun ref = testing::run_one_rank(gpu_ranks(one->get()), *dist::Mapping::make({}, 0), dir.path(),
                                                        prompt, kChunk, kDecode, {.record = true});
  ASSERT_TRUE(ref.status.ok()) << ref.status.to_string();
  const testing::Bounds bounds = GetParam() == 0 ? testing::kKimiLinearBounds : testing::kK3Bounds;
  const dist::ParallelSizes mappings[] = {
      {.world = 2, .tp = 2}, {.world = 4, .tp = 4}, {.world = 2, .tp = 2, .ep = 2}, {.world = 4, .tp = 4, .ep = 4},
      {.world = 4, .tp = 2, .ep = 2, .pp = 2}};
  for (const dist::ParallelSizes& sizes : mappings) {
    const std::string what = std::string(family.name) + " tp " + std::to_string(sizes.tp) + " ep " +
                             std::to_string(sizes.ep) + " pp " + std::to_string(sizes.pp) + " against tp 1";
    auto world = backend::CommWorld::make(sizes.world, {backend::CommKind::SharedGpu});
    ASSERT_TRUE(world.ok()) << world.status().to_string();
    const auto runs = testing::run_sharded(
        sizes, gpu_ranks(world->get()), dir.path(), prompt, kChunk, kDecode,
        [&](int r, const Status& s) { (*world)->fail(r, s.to_string()); },
        {.tokens = &ref.tokens, .routing = &ref.routing});
    for (int r = 0; r < sizes.world; ++r) {
      ASSERT_TRUE(runs[size_t(r)].status.ok()) << what << ", rank " << r << ": " << runs[size_t(r)].status.to_string();
      ASSERT_EQ(runs[size_t(r)].logits.size(), ref.logits.size());
    }
    testing::Compare c;
    testing::compare_rows(runs[0].logits, ref.logits, /*V=*/512, &c);  // both test configs
    // Both runs are bf16 on the GPU and differ only in summation order: a top-1 flip at a near tie (the one
    // rank's own margin within the per-position bound of its largest logit) is that order, not a bug (seed
    // 3613361583 flipped 6 of 96 positions at tp 4 ep 4 on an H100 with median rel L2 1.1%).
    const int ties = testing::count_near_ties(runs[0].logits, ref.logits, /*V=*/512, bounds.median);
    std::printf("%s: median %.4f, worst %.4f, top-1 %d/%d (+%d near ties)\n", what.c_str(), c.median(),
                c.worst_rel_l2, c.agree, c.total, ties);
    for (size_t i = 0; i < c.rel.size(); ++i)  // the positions far outside bf16 rounding, to tell where
      if (c.rel[i] > bounds.worst) std::printf("  position %zu of %zu: rel L2 %.4f\n", i, c.rel.size(), c.rel[i]);
    c.agree += ties;
    testing::expect_within_bounds(c, what, bounds);
    for (int r = 1; r < sizes.world; ++r)  // every rank of the first and last stage has the same logits
      if (const int stage = dist::Mapping::make(sizes, r)->pp_rank(); stage == 0 || stage == sizes.pp - 1) {
        EXPECT_EQ(runs[size_t(r)].logits, runs[0].logits) << what << ", rank " << r;
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, CudaShardedModel, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::string(testing::kShardFamilies[i.param].name);
                         });

}  // namespace
}  // namespace rill
