#include "runner/memory_plan.h"

#include <algorithm>

#include "model/model.h"

namespace rill::runner {

using cache::MemoryPlan;
using cache::PrefixCacheOptions;

Result<double> cache_memory_budget(size_t free, size_t total, double utilization, double kv_fraction) {
  constexpr double kGiB = double(1 << 30);
  if (utilization <= 0) {
    if (kv_fraction <= 0 || kv_fraction > 1) return invalid_argument("--kv-cache-fraction must be in (0, 1]");
    return double(free) * kv_fraction;
  }
  if (utilization > 1) return invalid_argument("--gpu-memory-utilization {} must be in (0, 1]", utilization);
  const double in_use = double(total) - double(free), budget = utilization * double(total) - in_use;
  if (budget <= 0)
    return resource_exhausted(
        "--gpu-memory-utilization {}: {:.2f} GiB of the device's {:.2f} GiB, but {:.2f} GiB are in use "
        "already (the weights, the step workspace and other processes): nothing is left for the caches; "
        "raise it",
        utilization, utilization * double(total) / kGiB, double(total) / kGiB, in_use / kGiB);
  return budget;
}

Result<MemoryPlan> plan_memory(backend::Backend& be, const model::ModelConfig& c, int n_slots,
                               int max_model_len, double kv_fraction, int n_blocks, int block_size,
                               const PrefixCacheOptions& prefix, double gpu_memory_utilization,
                               bool speculation, cache::KdaRollback rollback, int record_tokens) {
  if (n_slots < 1) return invalid_argument("--max-batch-size must be at least 1");
  if (block_size < 1) return invalid_argument("block size must be positive");
  if (prefix.enabled && (prefix.snapshot_interval < block_size || prefix.snapshot_interval % block_size != 0))
    return invalid_argument("--kda-snapshot-interval {} must be a positive multiple of the block size {}",
                            prefix.snapshot_interval, block_size);
  if (prefix.enabled && prefix.snapshot_budget_bytes < 0)
    return invalid_argument("--kda-snapshot-budget must not be negative");
  MemoryPlan p;
  p.n_slots = n_slots;
  p.block_size = block_size;
  const DType act = be.act_dtype();
  auto state_bytes = [&](int slots) {
    return model::ModelCaches::bytes_needed(c, act, slots, 1, block_size) -
           model::ModelCaches::bytes_needed(c, act, 0, 1, block_size);
  };
  const int64_t state = state_bytes(n_slots);
  const int64_t per_block = model::ModelCaches::bytes_needed(c, act, 0, 2, block_size) -
                            model::ModelCaches::bytes_needed(c, act, 0, 1, block_size);
  const int64_t per_slot = std::max<int64_t>(state_bytes(1), 1);
  int n_snapshots =
      prefix.enabled ? int(std::min<int64_t>(prefix.snapshot_budget_bytes / per_slot, 1 << 20)) : 0;
  // Staging slots (in-step snapshots) come on top of the snapshot budget: one state slot per snapshot
  // position a step can pass. (Writing the snapshots straight into pool slots reserved before the step would
  // save this memory and the copy after the step.)
  p.n_staging = prefix.enabled ? std::max(prefix.staging_slots, 0) : 0;
  // Speculative decoding: a checkpoint slot per sequence slot holds the state from before its drafts, or
  // replay records of its verify step's tokens (8.5x smaller at the 48B shape and k = 4: docs/PERF.md).
  const bool records = speculation && rollback == cache::KdaRollback::Records;
  if (records && record_tokens < 2)
    return invalid_argument("replay records need at least 2 tokens a step (got {})", record_tokens);
  p.n_checkpoints = speculation && !records ? n_slots : 0;
  p.checkpoint_bytes = state_bytes(p.n_checkpoints);
  p.n_record_slots = records ? n_slots : 0;
  p.record_tokens = records ? record_tokens : 0;
  p.record_bytes = model::ModelCaches::record_bytes(c, act, {p.n_record_slots, p.record_tokens});
  p.state_bytes = state;
  if (n_blocks > 0) {
    p.n_blocks = n_blocks;
  } else if (auto mem = be.device_memory()) {
    const double u = gpu_memory_utilization;
    RILL_ASSIGN_OR_RETURN(const double caches, cache_memory_budget(mem->first, mem->second, u, kv_fraction));
    const double budget =
        caches - double(state_bytes(n_slots + n_snapshots + p.n_staging + p.n_checkpoints)) - double(p.record_bytes);
    if (budget < double(per_block))
      return resource_exhausted(
          "no device memory left for the KV cache: {} leaves {:.2f} GiB for the caches, less than the "
          "{:.2f} GiB of KDA state for {} sequences and {} snapshots (and speculation checkpoints) plus one "
          "{:.2f} MiB KV block; lower --max-batch-size or --kda-snapshot-budget{}",
          u > 0 ? fmt::format("--gpu-memory-utilization {} of {:.2f} GiB with {:.2f} GiB in use", u,
                              double(mem->second) / (1 << 30), double(mem->second - mem->first) / (1 << 30))
                : fmt::format("{:.2f} GiB free x --kv-cache-fraction {}", double(mem->first) / (1 << 30),
                              kv_fraction),
          caches / (1 << 30),
          double(state_bytes(n_slots + n_snapshots + p.n_staging + p.n_checkpoints)) / (1 << 30), n_slots,
          n_snapshots, double(per_block) / (1 << 20), u > 0 ? ", or raise --gpu-memory-utilization" : "");
    p.n_blocks = int(std::min<double>(budget / double(per_block), 1 << 30));
  } else {
    // Host memory (CPU backend): every slot can hold 2048 tokens at once, and one sequence the whole context;
    // more is served by preemption rather than reserved up front.
    const int per_seq = (std::min(max_model_len, 2048) + block_size - 1) / block_size;
    p.n_blocks = std::max(n_slots * per_seq, (max_model_len + block_size - 1) / block_size);
  }
  p.n_blocks = std::max(p.n_blocks, 1);
  p.kv_bytes = per_block * p.n_blocks;
  if (prefix.enabled) {
    // One snapshot per interval of cached tokens plus one per slot: a larger pool could never fill.
    const int64_t useful = int64_t(p.n_blocks) * block_size / prefix.snapshot_interval + n_slots;
    p.n_snapshots = int(std::min<int64_t>(n_snapshots, useful));
    p.snapshot_bytes = state_bytes(n_slots + p.n_snapshots + p.n_staging) - state;
  }
  // Where the flags size the caches (the CPU, --num-kv-blocks) rather than the free memory: they must fit.
  RILL_TRY(be.check_available(
      uint64_t(p.state_bytes + p.kv_bytes + p.snapshot_bytes + p.checkpoint_bytes + p.record_bytes),
      fmt::format("the caches ({}; set by --max-batch-size, --max-model-len, --num-kv-blocks)",
                  p.describe())));
  return p;
}

}  // namespace rill::runner
