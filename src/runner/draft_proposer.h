// DraftProposer: speculative decoding's draft model (vLLM's `draft_model` method, a smaller checkpoint with
// the target's vocabulary) run greedily by the executor on the target's device, as vLLM's draft proposer
// shares the target's worker: a ModelRunner over the draft checkpoint (on the target's backend, which the
// executor owns) and that runner's cache bookkeeping (a cache::CacheManager). No engine, no thread: `propose`
// runs the draft steps on the calling thread (the engine's) and returns when every answer is there.
//
// A step's queries are answered together: each is admitted after its longest cached prefix, the rest of its
// context prefilled (chunks of several queries share steps), then one batched greedy step per draft token
// serves all of them. Between calls the draft's per-sequence state is its prefix cache (a KDA snapshot every
// block, drafts included), so a proposal re-prefills at most a block plus the tokens new since the last one;
// a rejected draft needs no rollback here (a proposal reads only the context it is given). Not done: a state
// slot per target sequence following its committed tokens (checkpoint and rollback as the target's), which
// would save that re-prefill.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runner/model_runner.h"

namespace rill::runner {

// One sequence's question: up to `max_tokens` greedy tokens of the draft model after `context`.
struct DraftRequest {
  std::span<const int32_t> context;
  int max_tokens = 0;
};

// The draft's caches take this fraction of the device memory free after its weights (GPU; created before
// the target plans its caches, which are sized from what is left), and at most this much for KDA snapshots.
// Chosen, not measured: a draft model is a few percent of the target, and a draft short of blocks only
// answers with fewer drafts, never holds up the target's requests.
constexpr double kDraftKvCacheFraction = 0.1;
constexpr int64_t kDraftSnapshotBudgetBytes = 512ll << 20;

// The draft runner's options for a target runner's `target`: as many sequences and tokens per step, the same
// context and block size; prefix caching with a KDA snapshot every block; no speculation, no tiers.
RunnerOptions draft_runner_options(const RunnerOptions& target);

class DraftProposer {
 public:
  // Loads `target.draft` on `be` (which must outlive the proposer); its vocabulary must have `target_vocab`
  // tokens (the error names both).
  static Result<std::unique_ptr<DraftProposer>> create(backend::Backend& be, const RunnerOptions& target,
                                                       int64_t target_vocab);
  // The draft model's greedy continuation of each request's context, in order: fewer tokens, or none, where
  // the context leaves no room in its max_model_len, its caches run out of blocks, or a draft step fails
  // (logged; that call then answers no drafts at all).
  std::vector<std::vector<int32_t>> propose(std::span<const DraftRequest> requests);

  // Draft steps run so far (tests: a call's queries share their steps).
  uint64_t steps() const { return steps_; }
  const ModelRunner& runner() const { return *runner_; }

 private:
  struct Job;
  DraftProposer(std::unique_ptr<ModelRunner> runner, cache::CacheManager caches, RunnerOptions options)
      : runner_(std::move(runner)), caches_(std::move(caches)), options_(std::move(options)) {}
  // Steps until every job is done; an error leaves the jobs' caches to the caller.
  Status run(std::vector<Job>& jobs);
  Status finish(Job& job);

  std::unique_ptr<ModelRunner> runner_;
  cache::CacheManager caches_;
  RunnerOptions options_;  // the draft runner's
  uint64_t steps_ = 0;
};

}  // namespace rill::runner
