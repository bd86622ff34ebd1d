// The per-GPU memory plan of a mapping (model/parallel_plan.h, `rill inspect -tp -ep -pp`) against closed
// forms: KDA state and MLA KV per rank from the config's dimensions; weights linear in 1/tp (what tp splits
// shrinks by exactly (1 - 1/tp), so the split part read off TP 2, 4 and 8 agrees to the byte); stages that
// partition the layers and the weights; the released K3 config needing 16 H200s; refusals by name.
#include "model/parallel_plan.h"

#include <gtest/gtest.h>

#include "model/presets.h"

namespace rill::model {
namespace {

ModelConfig preset(const char* name) {
  auto j = preset_config(name);
  EXPECT_TRUE(j.ok());
  auto c = ModelConfig::from_json(*j, name);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

ParallelPlan plan(const ModelConfig& c, int tp, int ep = 1, int pp = 1) {
  auto p = plan_parallel(c, {.world = tp * pp, .tp = tp, .ep = ep, .pp = pp});
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? *p : ParallelPlan{};
}

TEST(ParallelPlan, KimiLinear48bCachesPerRankInClosedForm) {
  const ModelConfig c = preset("kimi-linear-48b");
  for (int tp : {1, 2, 4, 8}) {
    const ParallelPlan p = plan(c, tp);
    ASSERT_EQ(p.stages.size(), 1u);
    const int64_t heads = 32 / tp;  // 20 KDA layers of 32 heads x 128; conv window 3 rows of q|k|v in bf16
    EXPECT_EQ(p.stages[0].state_bytes_per_sequence, 20 * (heads * 128 * 128 * 4 + 3 * 3 * heads * 128 * 2)) << tp;
    EXPECT_EQ(p.stages[0].kv_bytes_per_token, 7 * 576 * 2) << tp;  // latent replicated on every rank
  }
}

TEST(ParallelPlan, WeightsShrinkLinearlyInOneOverTp) {
  for (const char* name : {"kimi-linear-48b", "kimi-k3-slice"}) {
    const ModelConfig c = preset(name);
    const int64_t w1 = plan(c, 1).max_weight_bytes(), w2 = plan(c, 2).max_weight_bytes(),
                  w4 = plan(c, 4).max_weight_bytes(), w8 = plan(c, 8).max_weight_bytes();
    // w_tp = R + S / tp: the split part S seen from each pair is the same number.
    const int64_t s2 = 2 * (w1 - w2), s4 = (w1 - w4) * 4 / 3, s8 = (w1 - w8) * 8 / 7;
    EXPECT_EQ(s2, s4) << name;
    EXPECT_EQ(s2, s8) << name;
    EXPECT_GT(s2, w1 / 2) << name << ": most of the weights are split";
    EXPECT_EQ(plan(c, 8, 8).max_weight_bytes(), w8) << name << ": EP moves the experts' split, not its size";
  }
}

TEST(ParallelPlan, StagesPartitionLayersAndWeights) {
  const ModelConfig c = preset("kimi-k3");
  const ParallelPlan one = plan(c, 8, 8, 1), two = plan(c, 8, 8, 2);
  ASSERT_EQ(two.stages.size(), 2u);
  EXPECT_EQ(two.stages[0].first_layer, 0);
  EXPECT_EQ(two.stages[0].end_layer, two.stages[1].first_layer);
  EXPECT_EQ(two.stages[1].end_layer, c.n_layers);
  EXPECT_EQ(two.stages[0].weight_bytes + two.stages[1].weight_bytes, one.stages[0].weight_bytes);
  EXPECT_EQ(two.stages[0].n_kda + two.stages[1].n_kda, c.n_layers_of(LayerKind::Kda));
  EXPECT_EQ(two.stages[0].kv_bytes_per_token + two.stages[1].kv_bytes_per_token, one.stages[0].kv_bytes_per_token);
}

TEST(ParallelPlan, KimiK3NeedsSixteenH200s) {
  const ModelConfig c = preset("kimi-k3");
  const double gib = double(1ull << 30), h200 = 140 * gib * 0.9;
  EXPECT_GT(double(plan(c, 8, 8).max_weight_bytes()), h200) << "one node of 8 cannot hold K3";
  EXPECT_LT(double(plan(c, 16, 16).max_weight_bytes()), h200 - 8 * gib) << "TP16 x EP16 leaves room for caches";
  EXPECT_LT(double(plan(c, 8, 8, 2).max_weight_bytes()), h200 - 8 * gib) << "PP2 x TP8 x EP8 too";
}

TEST(ParallelPlan, RefusalsNameWhatDoesNotDivide) {
  const ModelConfig c = preset("kimi-linear-48b");
  auto tp3 = plan_parallel(c, {.world = 3, .tp = 3});
  ASSERT_FALSE(tp3.ok());
  EXPECT_NE(tp3.status().message().find("not divisible by --tensor-parallel-size 3"), std::string::npos);
  auto pp = plan_parallel(c, {.world = 28, .pp = 28});
  ASSERT_FALSE(pp.ok());
  EXPECT_NE(pp.status().message().find("more stages than the model's 27 layers"), std::string::npos);
  EXPECT_FALSE(plan_parallel(c, {.world = 4, .tp = 4, .ep = 3}).ok());  // Mapping: ep must divide tp
}

}  // namespace
}  // namespace rill::model
