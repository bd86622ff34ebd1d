// CacheManager: the device caches of a model (MLA latent blocks, KDA state slots) and the verbs the scheduler
// uses on them (style.md §7.3): can_admit / admit / blocks_to_grow / grow / release. Planning (the `can_`
// and `*_to_*` queries) never mutates; only admit, grow and release do.
#pragma once

#include <string>
#include <vector>

#include "cache/id_pool.h"
#include "model/model.h"

namespace rill::cache {

// What the caches hold for one sequence.
struct SequenceCache {
  int32_t slot = -1;
  std::vector<int32_t> blocks;  // covers positions [0, blocks.size() * block_size)
};

struct MemoryPlan {
  int n_slots = 0, n_blocks = 0, block_size = 64;
  int64_t state_bytes = 0, kv_bytes = 0;
  std::string describe() const;
};

class CacheManager {
 public:
  static Result<CacheManager> create(backend::Backend& be, const model::ModelConfig& c, const MemoryPlan& plan);

  const model::ModelCaches& caches() const { return caches_; }
  int block_size() const { return caches_.block_size; }
  int blocks_for(int n_tokens) const { return (n_tokens + block_size() - 1) / block_size(); }

  bool can_admit(int first_step_tokens) const;
  Status admit(SequenceCache* seq, int first_step_tokens);
  // Blocks `seq` still needs to hold `total_tokens` positions.
  int blocks_to_grow(const SequenceCache& seq, int total_tokens) const;
  Status grow(SequenceCache* seq, int total_tokens);
  Status release(SequenceCache* seq);

  const IdPool& blocks() const { return blocks_; }
  const IdPool& slots() const { return slots_; }

 private:
  CacheManager(model::ModelCaches caches, int n_slots, int n_blocks)
      : caches_(std::move(caches)), blocks_("MLA cache blocks", n_blocks), slots_("KDA state slots", n_slots) {}
  model::ModelCaches caches_;
  MlaBlockPool blocks_;
  KdaStateSlots slots_;
};

// Sizes the caches: `n_slots` sequences; blocks from `kv_fraction` of the device memory left after weights
// and workspace (GPU), or enough for every slot to reach `max_model_len` (CPU), unless `n_blocks` is given.
Result<MemoryPlan> plan_memory(backend::Backend& be, const model::ModelConfig& c, int n_slots, int max_model_len,
                               double kv_fraction, int n_blocks, int block_size);

}  // namespace rill::cache
