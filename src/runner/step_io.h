// What a step carries besides its StepBatch (design.md §4): the sampling controls of every logits row, and
// what comes back — one token per row with its logprobs. Plain data: no engine types, so one leader's batch
// can be described to any runner.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace rill::runner {

// One logits row's sampling: the draw, penalties over the row's tokens, an optional token mask, logprobs.
struct RowSampling {
  backend::SamplingRow draw;  // temperature, top_p, min_p, top_k, seed, counter
  float presence_penalty = 0.0f, frequency_penalty = 0.0f, repetition_penalty = 1.0f;
  // Penalty inputs, owned by the caller and valid through execute(): generated token -> occurrences, and the
  // distinct prompt tokens (repetition penalty only).
  const std::map<int32_t, int32_t>* output_counts = nullptr;
  const std::set<int32_t>* prompt_tokens = nullptr;
  bool masked = false;    // the row's words in SamplingBatch::mask apply
  int32_t logprobs = -1;  // -1: none; 0: the sampled token's; n: plus the n most likely
  bool poison_logits = false;  // tests only: the row's logits are overwritten with NaN before sampling
  bool uses_penalties() const {
    return presence_penalty != 0 || frequency_penalty != 0 || repetition_penalty != 1;
  }
};

struct SamplingBatch {
  std::vector<RowSampling> rows;  // one per logits row of the step, in order
  // Token masks [rows, words_per_row] (bit t % 32 of word t / 32: token t may be sampled); rows that are not
  // masked hold all-ones words. Empty when no row is masked.
  std::vector<uint32_t> mask;
  int64_t words_per_row = 0;
  bool want_logits = false;  // copy the rows' logits, as sampled from, to the host (tests: the logits hook)
};

struct SampledToken {
  int32_t id = 0;
  // The row's raw logits held a NaN or infinity (a broken forward): `id` is meaningless, and the caller ends
  // the row's request with an error rather than sample from it (a grammar mask cannot make it valid).
  bool nonfinite = false;
  float logprob = 0.0f;                        // when the row asked for logprobs
  std::vector<std::pair<int32_t, float>> top;  // the row's most likely tokens, best first
};

struct StepOutput {
  std::vector<SampledToken> tokens;  // one per logits row
  std::vector<float> logits;         // [rows, vocab] when SamplingBatch::want_logits
  int64_t vocab = 0;
  // Host time the step's host tier copies took before it ran (CPU: the copies; CUDA: issuing them).
  double tier_copy_seconds = 0;
  // The step replayed a captured decode graph: its wall time is a steady-state step's (the engine measures
  // decode and verify costs from these, engine/spec/step_costs.h).
  bool replayed = false;
};

}  // namespace rill::runner
