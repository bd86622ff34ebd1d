// DraftModelDrafter: a smaller checkpoint rill can load, run greedily as the drafter (vLLM's `draft_model`
// method, {"method": "draft_model", "model": DIR, "num_speculative_tokens": K}). The draft model runs in an
// Engine of its own (its own model, caches, scheduler and thread; built by the caller, which loads the
// checkpoint: EngineOptions::make_draft_engine, with draft_engine_options), and each proposal is one greedy
// request of up to K tokens for the whole context. A step's proposals are submitted together, so the draft
// engine batches them (one draft step per token for all sequences). Its per-sequence state is what that
// engine's prefix cache keeps: a proposal re-prefills only from the last KDA snapshot and block of the
// previous one, so the context is not recomputed from the start each step; a rejected draft needs no
// rollback here (drafts never enter the cache as prompt, only the committed context does). Not done: a
// state slot per sequence inside one runner (the draft's KDA state following the committed tokens as the
// target's does), which would save the re-prefill of up to a block per proposal.
#pragma once

#include <memory>

#include "engine/engine.h"
#include "engine/spec/drafter.h"

namespace rill::engine::spec {

// The draft engine's caches take this fraction of the device memory free after its weights (GPU; the
// target's caches are sized after, from what is left), and at most this much for KDA snapshots. Chosen, not
// measured: a draft model is a few percent of the target, and a draft engine short of blocks only queues
// proposals (fewer drafts), never the target's requests.
constexpr double kDraftKvCacheFraction = 0.1;
constexpr int kDraftSnapshotBudgetMib = 512;

// The draft engine's options for a target engine's `target`: as many sequences and tokens per step, the
// same context and block size; prefix caching on with a KDA snapshot every block (so a proposal re-prefills
// at most a block plus the new tokens); speculation off.
EngineOptions draft_engine_options(const EngineOptions& target);

class DraftModelDrafter final : public Drafter {
 public:
  explicit DraftModelDrafter(std::unique_ptr<Engine> draft_engine);
  ~DraftModelDrafter() override;
  // The draft model's greedy continuation of `context` (fewer tokens, or none, where its engine refuses the
  // request, e.g. a context longer than its max_model_len).
  std::vector<int32_t> propose(std::span<const int32_t> context, int max_tokens) const override;
  // The queries submitted together and answered in order.
  std::vector<std::vector<int32_t>> propose_batch(std::span<const DraftQuery> queries) const override;
  const Engine& engine() const { return *engine_; }

 private:
  std::unique_ptr<Engine> engine_;
};

}  // namespace rill::engine::spec
