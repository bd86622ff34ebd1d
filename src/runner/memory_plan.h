// plan_memory: how many state slots, MLA blocks and KDA snapshots a runner's cache storage holds, from the
// flags and the memory the backend has left after the weights and the step workspace.
#pragma once

#include "backend/backend.h"
#include "cache/cache_manager.h"
#include "model/config.h"

namespace rill::runner {

// Sizes the caches: `n_slots` sequences; blocks from `kv_fraction` of the device memory left after weights,
// workspace and snapshots (GPU), or enough for every slot to reach `max_model_len` (CPU), unless `n_blocks`
// is given; with prefix caching, as many snapshots as `prefix.snapshot_budget_bytes` holds (at most one per
// interval of the cache plus one per slot: more could never be found).
// The bytes the caches may take on a device with `free` of its `total` bytes free (after the weights and
// the step workspace). `utilization` > 0: vLLM's --gpu-memory-utilization, the process may hold
// utilization x total in all, so the caches get that less what is in use (total - free); else
// `kv_fraction` (--kv-cache-fraction) of the free memory. Errors name the flag and the numbers.
Result<double> cache_memory_budget(size_t free, size_t total, double utilization, double kv_fraction);

// With `gpu_memory_utilization` > 0 the device memory budget follows it (cache_memory_budget) and
// `kv_fraction` is not used. With `speculation`, every sequence slot gets a checkpoint slot (its state from
// before a step's draft tokens) or, with `rollback` Records, replay records of `record_tokens` (k + 1) tokens,
// taken from the same budget.
Result<cache::MemoryPlan> plan_memory(backend::Backend& be, const model::ModelConfig& c, int n_slots,
                                      int max_model_len, double kv_fraction, int n_blocks, int block_size,
                                      const cache::PrefixCacheOptions& prefix = {},
                                      double gpu_memory_utilization = 0, bool speculation = false,
                                      cache::KdaRollback rollback = cache::KdaRollback::Checkpoint,
                                      int record_tokens = 0);

}  // namespace rill::runner
