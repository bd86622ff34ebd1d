#include "dist/mapping.h"

#include <array>

#include <fmt/format.h>

namespace rill::dist {

namespace {
// Indexed by GroupKind, in its order.
constexpr std::array<const char*, 6> kGroupKindNames = {"world", "tp", "pp", "dp", "ep", "moe_tp"};
static_assert(kGroupKindNames.size() == size_t(GroupKind::MoeTp) + 1, "a name for every GroupKind");
}  // namespace

const char* group_kind_name(GroupKind kind) {
  return size_t(kind) < kGroupKindNames.size() ? kGroupKindNames[size_t(kind)] : "?";
}

Result<Mapping> Mapping::make(const ParallelSizes& s, int rank) {
  const auto positive = [](const char* flag, int v) -> Status {
    if (v < 1) return invalid_argument("{} must be at least 1, got {}", flag, v);
    return {};
  };
  RILL_TRY(positive("world size", s.world));
  RILL_TRY(positive("--tensor-parallel-size", s.tp));
  RILL_TRY(positive("--expert-parallel-size", s.ep));
  RILL_TRY(positive("--pipeline-parallel-size", s.pp));
  RILL_TRY(positive("--data-parallel-size", s.dp));
  if (int64_t(s.tp) * s.pp * s.dp != s.world) {
    return invalid_argument(
        "--tensor-parallel-size {} x --pipeline-parallel-size {} x --data-parallel-size {} = {} ranks, but "
        "the "
        "world size is {}",
        s.tp, s.pp, s.dp, int64_t(s.tp) * s.pp * s.dp, s.world);
  }
  const int stage = s.tp * s.dp;
  if (s.ep > stage || stage % s.ep != 0) {
    return invalid_argument(
        "--expert-parallel-size {} must divide --tensor-parallel-size {} x --data-parallel-size {} = {} (the "
        "ranks of a pipeline stage that share the experts)",
        s.ep, s.tp, s.dp, stage);
  }
  if (rank < 0 || rank >= s.world)
    return out_of_range("rank {} is outside the world of {} ranks", rank, s.world);
  return Mapping(s, rank);
}

int Mapping::world_rank(int dp_rank, int pp_rank, int tp_rank) const {
  return (dp_rank * sizes_.pp + pp_rank) * sizes_.tp + tp_rank;
}

int Mapping::stage_member(int pp_rank, int stage_index) const {
  return world_rank(stage_index / sizes_.tp, pp_rank, stage_index % sizes_.tp);
}

int Mapping::rank_in(GroupKind kind) const {
  switch (kind) {
    case GroupKind::World:
      return rank_;
    case GroupKind::Tp:
      return tp_rank();
    case GroupKind::Pp:
      return pp_rank();
    case GroupKind::Dp:
      return dp_rank();
    case GroupKind::Ep:
      return ep_rank();
    case GroupKind::MoeTp:
      return moe_tp_rank();
  }
  return 0;
}

int Mapping::group_index(GroupKind kind) const {
  const int tp = sizes_.tp, pp = sizes_.pp;
  switch (kind) {
    case GroupKind::World:
      return 0;
    case GroupKind::Tp:
      return dp_rank() * pp + pp_rank();
    case GroupKind::Pp:
      return dp_rank() * tp + tp_rank();
    case GroupKind::Dp:
      return pp_rank() * tp + tp_rank();
    case GroupKind::Ep:
      return pp_rank() * moe_tp_size() + moe_tp_rank();
    case GroupKind::MoeTp:
      return pp_rank() * sizes_.ep + ep_rank();
  }
  return 0;
}

std::vector<int> Mapping::group(GroupKind kind) const {
  std::vector<int> g;
  switch (kind) {
    case GroupKind::World:
      for (int r = 0; r < sizes_.world; ++r) g.push_back(r);
      break;
    case GroupKind::Tp:
      for (int t = 0; t < sizes_.tp; ++t) g.push_back(world_rank(dp_rank(), pp_rank(), t));
      break;
    case GroupKind::Pp:
      for (int p = 0; p < sizes_.pp; ++p) g.push_back(world_rank(dp_rank(), p, tp_rank()));
      break;
    case GroupKind::Dp:
      for (int d = 0; d < sizes_.dp; ++d) g.push_back(world_rank(d, pp_rank(), tp_rank()));
      break;
    case GroupKind::Ep:
      for (int e = 0; e < sizes_.ep; ++e) g.push_back(stage_member(pp_rank(), moe_tp_rank() * sizes_.ep + e));
      break;
    case GroupKind::MoeTp:
      for (int m = 0; m < moe_tp_size(); ++m) g.push_back(stage_member(pp_rank(), m * sizes_.ep + ep_rank()));
      break;
  }
  return g;
}

std::vector<std::vector<int>> Mapping::all_groups(GroupKind kind) const {
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < sizes_.world; ++r) {
    const Mapping m(sizes_, r);
    const int index = m.group_index(kind);
    if (index >= int(groups.size())) groups.resize(index + 1);
    if (groups[index].empty()) groups[index] = m.group(kind);
  }
  return groups;
}

std::string Mapping::describe() const {
  return fmt::format("rank {} of {}: tp {}/{}, pp {}/{}, dp {}/{}, ep {}/{}, moe_tp {}/{}", rank_,
                     sizes_.world, tp_rank(), sizes_.tp, pp_rank(), sizes_.pp, dp_rank(), sizes_.dp,
                     ep_rank(), sizes_.ep, moe_tp_rank(), moe_tp_size());
}

}  // namespace rill::dist
