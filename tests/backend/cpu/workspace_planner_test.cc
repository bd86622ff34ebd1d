// backend::WorkspacePlanner over the CPU backend: a planning pass is a backend of its own — the planned
// backend never plans, the planner always does; its ops take their scratch and return without checking or
// running (views of a measuring arena have no memory), data movement does nothing, nothing allocates, and a
// layout is planned from its host side.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/workspace_planner.h"
#include "core/arena.h"

namespace rill::testing {
namespace {

TEST(WorkspacePlanner, PlansForTheBackendWithoutTouchingIt) {
  auto cpu = backend::make_cpu_backend();
  backend::WorkspacePlanner planner(*cpu);
  EXPECT_FALSE(cpu->plans_only());
  EXPECT_TRUE(planner.plans_only());
  EXPECT_EQ(planner.name(), cpu->name());
  EXPECT_EQ(planner.device(), cpu->device());
  EXPECT_EQ(planner.act_dtype(), cpu->act_dtype());
  EXPECT_EQ(planner.kda_snapshots_in_step(), cpu->kda_snapshots_in_step());

  // Views of a measuring arena have no memory: a real op would refuse them, a planned one only measures.
  Arena measure(nullptr, 0, cpu->device());
  const TensorView x = measure.alloc(DType::F32, {4, 8}), w = measure.alloc(DType::F32, {8});
  const TensorView out = measure.alloc(DType::F32, {4, 8});
  EXPECT_TRUE(planner.rms_norm({x, w, 1e-6f, out}).ok());
  EXPECT_FALSE(cpu->rms_norm({x, w, 1e-6f, out}).ok());
  EXPECT_TRUE(planner.fill_zero(out).ok());
  EXPECT_TRUE(planner.upload_async(nullptr, nullptr, 16).ok());
  EXPECT_FALSE(planner.allocate(16).ok());
  EXPECT_EQ(measure.high_water(), 3 * Arena::footprint(4 * 8 * 4));  // the views above, no scratch on the CPU

  backend::BatchLayoutHost host;
  host.seq_token_start = {0, 3};
  host.seq_start_pos = {5};
  host.seq_state_slot = {0};
  host.block_tables = {0};
  host.token_seq = {0, 0, 0};
  host.token_pos = {5, 6, 7};
  host.max_blocks_per_seq = 1;
  backend::BatchLayout planned;
  ASSERT_TRUE(planner.upload_layout(host, 64, &planned).ok());
  EXPECT_EQ(planned.n_tokens, 3);
  EXPECT_EQ(planned.max_context, 8);
  EXPECT_EQ(planned.host, &host);
  EXPECT_EQ(planned.token_pos, nullptr);  // nothing uploaded
}

}  // namespace
}  // namespace rill::testing
