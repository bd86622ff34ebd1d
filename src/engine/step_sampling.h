// The engine's side of sampling: each sampled sequence's controls as a runner::SamplingBatch — the draw,
// penalties, logprobs, and the token mask that a grammar, allowed_token_ids and min_tokens make (host policy;
// the runner applies it on the device).
#pragma once

#include <vector>

#include "engine/sequence.h"
#include "runner/step_io.h"

namespace rill::engine {

class StepSampling {
 public:
  // `eos_ids`: the model's end-of-sequence ids, masked with a request's stop ids before its min_tokens.
  StepSampling(std::vector<int32_t> eos_ids, int64_t vocab) : eos_ids_(std::move(eos_ids)), vocab_(vocab) {}
  // One row per sequence, in order; the sequences must outlive the batch (penalty inputs point into them).
  runner::SamplingBatch make(const std::vector<const Sequence*>& seqs, bool want_logits);

 private:
  bool masks_logits(const Sequence& s) const;
  void row_mask(const Sequence& s, std::span<uint32_t> mask);

  std::vector<int32_t> eos_ids_;
  int64_t vocab_;
  std::vector<uint32_t> narrowed_;
};

}  // namespace rill::engine
