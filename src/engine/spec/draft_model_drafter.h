// DraftModelDrafter: vLLM's `draft_model` method ({"method": "draft_model", "model": DIR,
// "num_speculative_tokens": K}): a smaller checkpoint with the target's vocabulary, run greedily. The draft
// model runs inside the executor, on the target's device (runner/draft_proposer.h: loaded by the executor
// from RunnerOptions::draft, which Engine::create fills from EngineOptions::speculative); this drafter only
// hands a step's queries to it in one call, on the engine thread, between steps.
#pragma once

#include "engine/spec/drafter.h"

namespace rill::runner {
class Executor;
}

namespace rill::engine::spec {

class DraftModelDrafter final : public Drafter {
 public:
  // `executor` runs the draft model (Executor::has_draft_model) and outlives the drafter.
  explicit DraftModelDrafter(runner::Executor& executor) : executor_(&executor) {}
  std::vector<int32_t> propose(std::span<const int32_t> context, int max_tokens) const override;
  // The queries answered together (the draft model's steps serve all of them).
  std::vector<std::vector<int32_t>> propose_batch(std::span<const DraftQuery> queries) const override;

 private:
  runner::Executor* executor_;
};

}  // namespace rill::engine::spec
