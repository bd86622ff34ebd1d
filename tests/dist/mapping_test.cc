// Mapping against the closed forms of vLLM's layout (TP innermost, then PP, then DP; EP over a stage's dp x
// tp ranks), for every valid mapping of up to 16 ranks, and the errors of the ones that do not divide.
#include "dist/mapping.h"

#include <gtest/gtest.h>

#include <set>

namespace rill::dist {
namespace {

std::vector<ParallelSizes> all_mappings(int max_world) {
  std::vector<ParallelSizes> out;
  for (int world = 1; world <= max_world; ++world)
    for (int tp = 1; tp <= world; ++tp)
      for (int pp = 1; pp <= world; ++pp)
        for (int dp = 1; dp <= world; ++dp) {
          if (tp * pp * dp != world) continue;
          for (int ep = 1; ep <= tp * dp; ++ep)
            if (tp * dp % ep == 0) out.push_back({world, tp, ep, pp, dp});
        }
  return out;
}

TEST(Mapping, CoordinatesAndGroupsMatchTheClosedForm) {
  const auto mappings = all_mappings(16);
  ASSERT_GT(mappings.size(), 200u);  // a typo in the loops would test nothing
  for (const ParallelSizes& s : mappings) {
    for (int r = 0; r < s.world; ++r) {
      SCOPED_TRACE(::testing::Message() << "world " << s.world << " tp " << s.tp << " pp " << s.pp << " dp "
                                        << s.dp << " ep " << s.ep << " rank " << r);
      auto m = Mapping::make(s, r);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      // r = (d * pp + p) * tp + t
      const int t = r % s.tp, p = (r / s.tp) % s.pp, d = r / (s.tp * s.pp);
      EXPECT_EQ(m->tp_rank(), t);
      EXPECT_EQ(m->pp_rank(), p);
      EXPECT_EQ(m->dp_rank(), d);
      const int stage = d * s.tp + t;  // position among the stage's dp x tp ranks
      EXPECT_EQ(m->ep_rank(), stage % s.ep);
      EXPECT_EQ(m->moe_tp_rank(), stage / s.ep);
      EXPECT_EQ(m->moe_tp_size() * s.ep, s.tp * s.dp);
      EXPECT_EQ(m->is_leader(), r == 0);
      EXPECT_EQ(m->is_first_stage(), p == 0);
      EXPECT_EQ(m->is_last_stage(), p == s.pp - 1);

      std::vector<int> tp_group, pp_group, dp_group, ep_group, moe_tp_group, world;
      for (int q = 0; q < s.world; ++q) {
        const int qt = q % s.tp, qp = (q / s.tp) % s.pp, qd = q / (s.tp * s.pp), qs = qd * s.tp + qt;
        world.push_back(q);
        if (qd == d && qp == p) tp_group.push_back(q);
        if (qd == d && qt == t) pp_group.push_back(q);
        if (qp == p && qt == t) dp_group.push_back(q);
        if (qp == p && qs / s.ep == stage / s.ep) ep_group.push_back(q);
        if (qp == p && qs % s.ep == stage % s.ep) moe_tp_group.push_back(q);
      }
      EXPECT_EQ(m->group(GroupKind::World), world);
      EXPECT_EQ(m->group(GroupKind::Tp), tp_group);
      EXPECT_EQ(m->group(GroupKind::Pp), pp_group);
      EXPECT_EQ(m->group(GroupKind::Dp), dp_group);
      EXPECT_EQ(m->group(GroupKind::Ep), ep_group);
      EXPECT_EQ(m->group(GroupKind::MoeTp), moe_tp_group);
      EXPECT_EQ(m->rank_in(GroupKind::Tp), t);
      EXPECT_EQ(m->rank_in(GroupKind::Pp), p);
      EXPECT_EQ(m->rank_in(GroupKind::Dp), d);
      EXPECT_EQ(m->world_rank(d, p, t), r);
    }
  }
}

TEST(Mapping, GroupsOfEachKindPartitionTheWorld) {
  for (const ParallelSizes& s : all_mappings(16)) {
    const Mapping m0 = Mapping::make(s, 0).value();
    for (GroupKind kind :
         {GroupKind::World, GroupKind::Tp, GroupKind::Pp, GroupKind::Dp, GroupKind::Ep, GroupKind::MoeTp}) {
      SCOPED_TRACE(::testing::Message() << "world " << s.world << " tp " << s.tp << " pp " << s.pp << " dp "
                                        << s.dp << " ep " << s.ep << " " << group_kind_name(kind));
      const auto groups = m0.all_groups(kind);
      const int expected_size = kind == GroupKind::World ? s.world
                                : kind == GroupKind::Tp  ? s.tp
                                : kind == GroupKind::Pp  ? s.pp
                                : kind == GroupKind::Dp  ? s.dp
                                : kind == GroupKind::Ep  ? s.ep
                                                         : s.tp * s.dp / s.ep;
      ASSERT_EQ(int(groups.size()) * expected_size, s.world);
      std::set<int> seen;
      for (size_t i = 0; i < groups.size(); ++i) {
        ASSERT_EQ(int(groups[i].size()), expected_size);
        for (size_t j = 0; j < groups[i].size(); ++j) {
          const int q = groups[i][j];
          EXPECT_TRUE(seen.insert(q).second) << "rank " << q << " in two groups";
          const Mapping mq = Mapping::make(s, q).value();
          EXPECT_EQ(mq.group_index(kind), int(i));
          EXPECT_EQ(mq.rank_in(kind), int(j));  // a group's ranks are numbered in list order
          EXPECT_EQ(mq.group(kind), groups[i]);
        }
      }
      EXPECT_EQ(int(seen.size()), s.world);
    }
  }
}

TEST(Mapping, RefusesWhatDoesNotDivideNamingTheFlags) {
  auto expect_error = [](ParallelSizes s, int rank, std::vector<std::string> words) {
    auto m = Mapping::make(s, rank);
    ASSERT_FALSE(m.ok());
    for (const auto& w : words)
      EXPECT_NE(m.status().message().find(w), std::string::npos) << m.status().message();
  };
  expect_error({4, 3, 1, 1, 1}, 0, {"--tensor-parallel-size 3", "world size is 4"});
  expect_error({8, 2, 1, 2, 1}, 0, {"--pipeline-parallel-size 2", "= 4 ranks", "world size is 8"});
  expect_error({4, 4, 3, 1, 1}, 0, {"--expert-parallel-size 3", "must divide", "= 4"});
  expect_error({4, 4, 8, 1, 1}, 0, {"--expert-parallel-size 8"});
  expect_error({4, 2, 1, 2, 1}, 4, {"rank 4", "4 ranks"});
  expect_error({4, 0, 1, 1, 1}, 0, {"--tensor-parallel-size must be at least 1"});
  expect_error({0, 1, 1, 1, 1}, 0, {"world size must be at least 1"});
  // ep up to dp x tp is valid: experts spread over data-parallel replicas too (vLLM).
  EXPECT_TRUE(Mapping::make({4, 2, 4, 1, 2}, 3).ok());
}

TEST(Mapping, DescribesTheRank) {
  const Mapping m = Mapping::make({8, 2, 2, 2, 2}, 5).value();
  EXPECT_EQ(m.describe(), "rank 5 of 8: tp 1/2, pp 0/2, dp 1/2, ep 1/2, moe_tp 1/2");
}

}  // namespace
}  // namespace rill::dist
