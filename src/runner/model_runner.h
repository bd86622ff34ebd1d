// ModelRunner: everything one rank needs to run steps (design.md §4): the model (and through it the backend
// and the step workspace), the cache storage, the sampler, and — on CUDA — the decode graphs. The engine
// reaches it only through an Executor.

// Decode graphs (decode_graphs.h) run where the backend can capture, unless --enforce-eager; with
// RunnerOptions::capture_graphs false their padded steps run eagerly on any backend.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cache/cache_manager.h"
#include "model/model.h"
#include "runner/decode_graphs.h"
#include "runner/disk_tier.h"
#include "runner/host_tier.h"
#include "runner/sampler.h"
#include "runner/step_io.h"

namespace rill::runner {

// Speculative decoding's draft model (vLLM's `draft_model` method), run by the executor beside the target
// (draft_proposer.h). Not sent to an mpirun job's worker processes: it runs on world rank 0 only.
struct DraftModelOptions {
  std::string dir;             // its checkpoint directory ("": none)
  bool dummy_weights = false;  // --load-format dummy: seeded random weights of its config.json
};

struct RunnerOptions {
  int max_batch_size = 64;    // sequences per step
  int max_num_tokens = 2048;  // tokens per step
  int max_model_len = 0;      // 0: the model's max_position_embeddings (CPU without cache sizes: 8192)
  double kv_cache_fraction = 0.9;
  double gpu_memory_utilization =
      0;                  // > 0: vLLM's meaning (cache_memory_budget), instead of kv_cache_fraction
  int num_kv_blocks = 0;  // explicit MLA block count (overrides the fraction)
  int block_size = 64;
  // Prefix caching; `staging_slots` is what the engine would like (dropped where the backend cannot take KDA
  // snapshots inside a step).
  cache::PrefixCacheOptions prefix;
  bool enforce_eager = false;  // no decode graphs (vLLM's --enforce-eager)
  // false: decode steps still run padded to their graph bucket with the graphs' fixed inputs, but eagerly and
  // on any backend — what a replay must reproduce exactly (tests; telling capture bugs from padding bugs).
  bool capture_graphs = true;
  // Speculative decoding: draft tokens a sequence may bring to one step (0: off). A step then has up to
  // 1 + num_speculative_tokens logits rows per sequence, and every sequence slot gets a checkpoint slot.
  int num_speculative_tokens = 0;
  // How a rejected draft's KDA state is rolled back (cache::KdaRollback): checkpoint slots (the default), or
  // replay records of num_speculative_tokens + 1 tokens per sequence slot instead.
  cache::KdaRollback kda_rollback = cache::KdaRollback::Checkpoint;
  // Prefix caching's host tier (vLLM's --kv-offloading-size, in bytes; 0: none): evicted MLA blocks and KDA
  // snapshots kept in host memory (pinned on CUDA). Memory that cannot be had is logged and the tier skipped.
  int64_t host_tier_bytes = 0;
  // Its disk tier (issue #38; `--kv-offloading-dir`, `--kv-offloading-disk-size`): items leaving the host tier
  // go to files in `disk_tier.dir` (empty: none). Needs the host tier; a directory that cannot be had is
  // logged and the tier skipped.
  DiskTierOptions disk_tier;
  // What the caller knows of the checkpoint (rill serve: config.json), folded into the disk tier's files'
  // fingerprint (cache_fingerprint.h).
  std::string model_identity;
  // Logits rows a step may return (0: one per sequence, times 1 + num_speculative_tokens). Scoring tools (rill
  // logits, perplexity) ask for every fed position's: max_num_tokens.
  int max_logit_rows = 0;
  DraftModelOptions draft;
};

// Applies a step's cache operations to `caches` (replay record folds first, as Backend::kda_fold per KDA
// layer; then KDA slot copies, on the backend's stream, with the effect of running them in order): every layer's copies of a wave go out as one Backend::copy_device_to_device_batch;
// the host tier's copies (`host`; required when there are any) as Backend::copy_host_tier_batch between them,
// where their `after` places them. `tier_seconds` (optional) adds the host time spent issuing those. The
// disk writes (`disk`; required when there are any) copy their host items out where their `after` places
// them, once the copies before them are done (Backend::synchronize), and queue them for the disk tier's
// writer.
Status apply_cache_ops(backend::Backend& be, const model::ModelCaches& caches, const cache::CacheOps& ops,
                       const HostTier* host = nullptr, double* tier_seconds = nullptr, DiskTier* disk = nullptr);

// The copies split into consecutive waves that may each run in any order (a batch's copies are unordered):
// a copy that reads a slot an earlier copy of the wave writes, or writes a slot one of them reads or writes (a
// snapshot taken and restored into a new sequence in one step; a freed slot's snapshot, then the slot reused),
// starts the next wave. Copies from a slot to itself are dropped.
std::vector<std::vector<cache::KdaSlotCopy>> copy_waves(const std::vector<cache::KdaSlotCopy>& copies);

class ModelRunner {
 public:
  static Result<std::unique_ptr<ModelRunner>> create(std::unique_ptr<model::Model> model,
                                                     const RunnerOptions& o);

  // The thread that calls execute() binds itself to the backend's device first.
  Status bind_thread() { return model_->backend().bind_thread(); }
  // Applies `ops`, runs the step and samples one token per logits row.
  Result<StepOutput> execute(const model::StepBatch& batch, const SamplingBatch& sampling,
                             const cache::CacheOps& ops);
  // Applies `ops` and runs the step; the logits stay on the device (a rank that does not sample).
  Result<TensorView> forward(const model::StepBatch& batch, const cache::CacheOps& ops);

  const model::Model& model() const { return *model_; }
  const cache::MemoryPlan& memory_plan() const { return plan_; }
  const cache::PrefixCacheOptions& prefix_options() const { return prefix_; }
  const HostTier& host_tier() const { return host_; }
  // The disk tier, or null.
  DiskTier* disk_tier() const { return disk_.get(); }
  // Reads disk tier items into the host tier ids the cache manager staged (after the ops that freed those ids
  // were applied), all at once on the disk tier's readers; one result per load (a failure is logged by the
  // disk tier).
  std::vector<bool> load_from_disk(const std::vector<cache::DiskLoad>& loads);
  // The longest sequence: the requested context, capped so that one sequence always fits in the cache alone.
  int max_model_len() const { return max_model_len_; }
  std::unique_ptr<model::Model> release_model();

  bool graphs_enabled() const { return graphs_.has_value(); }
  int graphs_captured() const { return graphs_ ? graphs_->captured() : 0; }
  uint64_t graph_replays() const { return graphs_ ? graphs_->replays() : 0; }
  uint64_t graph_steps() const { return graphs_ ? graphs_->steps() : 0; }
  // The most tokens a padded step may have and still replay (Backend::graph_max_expert_pairs).
  int64_t graph_max_tokens() const { return graphs_ ? graphs_->max_step_tokens() : 0; }

 private:
  ModelRunner(std::unique_ptr<model::Model> model, Sampler sampler)
      : model_(std::move(model)), sampler_(std::move(sampler)) {}

  std::unique_ptr<model::Model> model_;
  Sampler sampler_;
  cache::MemoryPlan plan_;
  cache::PrefixCacheOptions prefix_;
  model::ModelCaches caches_;
  backend::BatchLayoutHost layout_;  // the step's layout (eager steps; the graphs lay out their padded ones)
  HostTier host_;
  std::unique_ptr<DiskTier> disk_;
  double tier_seconds_ = 0;  // host time in the host tier's copies of the last step
  bool replayed_ = false;    // the last forward replayed a decode graph
  int max_model_len_ = 0;
  std::optional<DecodeGraphs> graphs_;  // see RunnerOptions::enforce_eager and capture_graphs
};

}  // namespace rill::runner
