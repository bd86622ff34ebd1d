// The engine's side of sampling: each sampled sequence's controls as a runner::SamplingBatch — the draw,
// penalties, logprobs, and the token mask that a grammar, allowed_token_ids and min_tokens make (host policy;
// the runner applies it on the device).
#pragma once

#include <deque>
#include <map>
#include <vector>

#include "engine/sequence.h"
#include "runner/step_io.h"

namespace rill::engine {

class StepSampling {
 public:
  // `eos_ids`: the model's end-of-sequence ids, masked with a request's stop ids before its min_tokens.
  StepSampling(std::vector<int32_t> eos_ids, int64_t vocab) : eos_ids_(std::move(eos_ids)), vocab_(vocab) {}
  // One logits row: the sequence it samples for, and the drafts this step feeds before it (a verify step's
  // row j follows d_1..d_j and samples output position n_generated + j, exactly as the step per token at
  // that position would: its draw counter, penalty counts, min_tokens and grammar masks). A plain row: none.
  struct Row {
    const Sequence* seq = nullptr;
    std::span<const int32_t> drafts;
    int32_t n_generated() const { return seq->n_generated() + int32_t(drafts.size()); }
  };
  // One row per logits row, in order; the sequences and drafts must outlive the batch (penalty inputs point
  // into them and into this object, until the next make).
  runner::SamplingBatch make(const std::vector<Row>& rows, bool want_logits);

 private:
  bool masks_logits(const Row& r) const;
  void row_mask(const Row& r, std::span<uint32_t> mask);

  std::vector<int32_t> eos_ids_;
  int64_t vocab_;
  std::vector<uint32_t> narrowed_;
  std::deque<std::map<int32_t, int32_t>> draft_counts_;  // verify rows' penalty counts (stable addresses)
};

}  // namespace rill::engine
