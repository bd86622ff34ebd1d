// Mapping: which tensor-, expert-, pipeline- and data-parallel coordinates a world rank has, and the groups
// of ranks it talks to. vLLM's layout: world = dp x pp x tp with TP innermost (the ranks of a TP group are
// consecutive, so they share a node), then PP, then DP. EP spans the dp x tp ranks of one pipeline stage and
// divides them into ep-sized expert groups; the ranks of a stage that hold the same experts form the
// expert-TP ("moe_tp") group that splits each expert's width (TensorRT-LLM's moe_tp x moe_ep = tp). ep = 1
// leaves the experts to the model: TP-split within experts or replicated.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace rill::dist {

// The flags a mapping comes from (vLLM's names: --tensor-parallel-size, --expert-parallel-size, ...).
struct ParallelSizes {
  int world = 1;
  int tp = 1;
  int ep = 1;
  int pp = 1;
  int dp = 1;
};

// A new kind goes last, with its name at the end of mapping.cc's kGroupKindNames.
enum class GroupKind { World, Tp, Pp, Dp, Ep, MoeTp };
const char* group_kind_name(GroupKind kind);  // "tp", "ep", ...

class Mapping {
 public:
  // Checks only the arithmetic (tp x pp x dp = world, ep divides dp x tp); head counts are the model's.
  static Result<Mapping> make(const ParallelSizes& sizes, int rank);

  const ParallelSizes& sizes() const { return sizes_; }
  int rank() const { return rank_; }
  int world_size() const { return sizes_.world; }
  int tp_size() const { return sizes_.tp; }
  int pp_size() const { return sizes_.pp; }
  int dp_size() const { return sizes_.dp; }
  int ep_size() const { return sizes_.ep; }
  int moe_tp_size() const { return sizes_.dp * sizes_.tp / sizes_.ep; }

  int tp_rank() const { return rank_ % sizes_.tp; }
  int pp_rank() const { return rank_ / sizes_.tp % sizes_.pp; }
  int dp_rank() const { return rank_ / (sizes_.tp * sizes_.pp); }
  // Position among the dp x tp ranks of this pipeline stage (DP-major), which EP and moe_tp divide.
  int stage_index() const { return dp_rank() * sizes_.tp + tp_rank(); }
  int ep_rank() const { return stage_index() % sizes_.ep; }
  int moe_tp_rank() const { return stage_index() / sizes_.ep; }

  // The leader (scheduler, cache manager, sampling) is world rank 0; the first and last pipeline stages hold
  // the embedding and the head.
  bool is_leader() const { return rank_ == 0; }
  bool is_first_stage() const { return pp_rank() == 0; }
  bool is_last_stage() const { return pp_rank() == sizes_.pp - 1; }

  // This rank's coordinate in a group of `kind`, the group's members (world ranks, ascending, the order the
  // group's ranks are numbered in) and its index among the groups of that kind (NCCL's split colour).
  int rank_in(GroupKind kind) const;
  std::vector<int> group(GroupKind kind) const;
  int group_index(GroupKind kind) const;
  // Every group of `kind` in index order; together they partition the world.
  std::vector<std::vector<int>> all_groups(GroupKind kind) const;

  // The world rank with the given coordinates.
  int world_rank(int dp_rank, int pp_rank, int tp_rank) const;

  std::string describe() const;  // "rank 5 of 8: tp 1/2, pp 0/2, dp 1/2, ep 3/4, moe_tp 0/1"

 private:
  Mapping(const ParallelSizes& sizes, int rank) : sizes_(sizes), rank_(rank) {}
  int stage_member(int pp_rank, int stage_index) const;

  ParallelSizes sizes_;
  int rank_ = 0;
};

}  // namespace rill::dist
