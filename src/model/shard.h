// ModelShard: which part of the model one rank holds and runs (issue #17, ../shared/spec/parallelism.md §1-§2).
// Tensor parallelism splits the KDA and MLA heads, the dense MLP and shared-expert widths and the lm_head's
// vocabulary over the tp ranks; expert parallelism gives each ep rank E/ep routed experts, and moe_tp splits
// every routed expert's width. Everything else (embedding, norms, router, the low-rank KDA gates, MLA's q_a and
// kv_a and so its latent cache, K3's AttnRes and latent projections) is replicated. One all-reduce over the tp
// group closes every mixer and every FFN; K3's latent MoE adds one for the routed latent partial.
#pragma once

#include <string>
#include <utility>

#include "core/status.h"
#include "dist/communicator.h"
#include "model/config.h"

namespace rill::dist {
class Mapping;
}

namespace rill::model {

struct ModelShard {
  int tp_rank = 0, tp_size = 1;
  int ep_rank = 0, ep_size = 1;
  int moe_tp_rank = 0, moe_tp_size = 1;
  int pp_rank = 0, pp_size = 1;  // pipeline stage: contiguous layers (stage_layers)
  // The tp group (with dp = 1 also the ranks that share the experts): every partial sum is reduced over it.
  // Not owned; null when tp_size == 1.
  dist::Communicator* tp_comm = nullptr;
  // The pp group (this tp rank of every stage, in stage order): the residual stream goes to the next stage,
  // the last stage's logits back to stage 0. Not owned; null when pp_size == 1.
  dist::Communicator* pp_comm = nullptr;

  static ModelShard from_mapping(const dist::Mapping& m, dist::Communicator* tp_comm,
                                 dist::Communicator* pp_comm = nullptr);
  bool whole() const { return tp_size == 1 && ep_size == 1 && moe_tp_size == 1 && pp_size == 1; }
  std::string describe() const;  // "tp 1/2, ep 0/1, moe_tp 1/2, pp 0/2"
};

// Stage `pp_rank` of `pp_size` holds layers [first, end): an even split, the earlier stages one layer shorter
// when it does not divide.
std::pair<int, int> stage_layers(int n_layers, int pp_rank, int pp_size);

// Whether `global` can be split so: every split dimension divides (heads, widths, experts, vocabulary, the
// MXFP4 32-column scale groups); the error names the dimension, its size and the flag.
Status check_shard(const ModelConfig& global, const ModelShard& shard);

// The config one rank runs: the KDA and MLA head counts are per rank (so the caches, the memory plan and every
// attention kernel see the rank's heads) and first_layer / end_layer are its stage's; widths, vocabulary and
// MoE sizes stay as stored (the blocks and the lm_head divide them with the shard).
ModelConfig shard_config(const ModelConfig& global, const ModelShard& shard);

}  // namespace rill::model
