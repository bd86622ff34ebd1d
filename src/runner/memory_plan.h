// plan_memory: how many state slots, MLA blocks and KDA snapshots a runner's cache storage holds, from the flags
// and the memory the backend has left after the weights and the step workspace.
#pragma once

#include "backend/backend.h"
#include "cache/cache_manager.h"
#include "model/config.h"

namespace rill::runner {

// Sizes the caches: `n_slots` sequences; blocks from `kv_fraction` of the device memory left after weights,
// workspace and snapshots (GPU), or enough for every slot to reach `max_model_len` (CPU), unless `n_blocks`
// is given; with prefix caching, as many snapshots as `prefix.snapshot_budget_bytes` holds (at most one per
// interval of the cache plus one per slot: more could never be found).
Result<cache::MemoryPlan> plan_memory(backend::Backend& be, const model::ModelConfig& c, int n_slots,
                                      int max_model_len, double kv_fraction, int n_blocks, int block_size,
                                      const cache::PrefixCacheOptions& prefix = {});

}  // namespace rill::runner
