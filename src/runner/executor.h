// Executor: the one thing the engine thread calls per step (design.md §2, §4). A local executor drives one
// ModelRunner; a multi-rank one (dist/) broadcasts each step to every rank's runner and samples on the
// leader.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "runner/draft_proposer.h"
#include "runner/model_runner.h"

namespace rill::runner {

class Executor {
 public:
  virtual ~Executor() = default;
  // Called once by the thread that will call execute().
  virtual Status bind_thread() = 0;
  // Applies the cache operations, runs the step, samples one token per logits row.
  virtual Result<StepOutput> execute(const model::StepBatch& batch, const SamplingBatch& sampling,
                                     const cache::CacheOps& ops) = 0;
  virtual const model::Model& model() const = 0;
  virtual const cache::MemoryPlan& memory_plan() const = 0;
  // The prefix-caching options the caches were planned with (staging slots as the backend allows).
  virtual const cache::PrefixCacheOptions& prefix_options() const = 0;
  virtual int max_model_len() const = 0;
  // The device the steps run on (rank 0's), for logs.
  virtual std::string device_description() const = 0;
  // Speculative decoding's draft model (RunnerOptions::draft), run on rank 0's device: whether there is one,
  // and its greedy proposals, one per request in order (DraftProposer::propose). Called on the thread that
  // calls execute(), between steps.
  virtual bool has_draft_model() const { return false; }
  virtual std::vector<std::vector<int32_t>> propose_drafts(std::span<const DraftRequest> requests) {
    return std::vector<std::vector<int32_t>>(requests.size());
  }
  // The prefix cache's disk tier (issue #38; none by default): the files found at start (handed over once),
  // reading staged items into the host tier (one result per load), its counters, and waiting for its queued
  // writes.
  virtual std::vector<cache::DiskRecord> take_disk_records() { return {}; }
  virtual std::vector<bool> load_from_disk(const std::vector<cache::DiskLoad>& loads) {
    return std::vector<bool>(loads.size(), false);
  }
  virtual std::optional<DiskTierStats> disk_stats() const { return std::nullopt; }
  virtual void drain_disk() {}
  // Hands the model back (benchmarks comparing engine settings on one loaded model); nothing runs after.
  virtual std::unique_ptr<model::Model> release_model() = 0;
};

// One ModelRunner on `model`'s backend (and the draft model of RunnerOptions::draft on the same backend).
// `backend`: that backend, for the executor to own (it outlives the model: rill serve, generate, chat); null
// when the caller keeps it alive past the executor (tests and benchmarks running several engines on one).
Result<std::unique_ptr<Executor>> make_local_executor(std::unique_ptr<model::Model> model, const RunnerOptions& o,
                                                      std::unique_ptr<backend::Backend> backend = nullptr);

// What the engine is made from: the executor for the runner options the engine derives from its own.
using ExecutorFactory = std::function<Result<std::unique_ptr<Executor>>(const RunnerOptions& options)>;
// A factory (for one call) of the local executor over `model` on `backend`, which the executor then owns.
ExecutorFactory local_executor_factory(std::unique_ptr<backend::Backend> backend,
                                       std::unique_ptr<model::Model> model);

}  // namespace rill::runner
