// DraftModelDrafter: a smaller checkpoint rill can load, run greedily as the drafter (vLLM's `draft_model`
// method, {"method": "draft_model", "model": DIR, "num_speculative_tokens": K}). First slice: the draft
// model runs in an Engine of its own (its own model, caches, scheduler and thread; built by the caller,
// which loads the checkpoint: EngineOptions::make_draft_engine), and each proposal is one greedy request of
// up to K tokens for the whole context. Its per-sequence state is what that engine's prefix cache keeps:
// with prefix caching on, a proposal re-prefills only from the last KDA snapshot and block of the previous
// one, so the context is not recomputed from the start each step; a rejected draft needs no rollback here
// (drafts never enter the cache as prompt, only the committed context does). Proposals are one at a time,
// on the engine thread: correct and simple, not fast — batching the proposals of a step and keeping a state
// slot per sequence inside one runner are the next steps (src/engine/spec/README.md).
#pragma once

#include <memory>

#include "engine/spec/drafter.h"

namespace rill::engine {
class Engine;
}

namespace rill::engine::spec {

class DraftModelDrafter final : public Drafter {
 public:
  explicit DraftModelDrafter(std::unique_ptr<Engine> draft_engine);
  ~DraftModelDrafter() override;
  // The draft model's greedy continuation of `context` (fewer tokens, or none, where its engine refuses the
  // request, e.g. a context longer than its max_model_len).
  std::vector<int32_t> propose(std::span<const int32_t> context, int max_tokens) const override;
  const Engine& engine() const { return *engine_; }

 private:
  std::unique_ptr<Engine> engine_;
};

}  // namespace rill::engine::spec
