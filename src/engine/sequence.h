// Sequence: one request's state inside the engine — counters, not phases (style.md §7.3): tokens holds the
// prompt then every generated token; n_computed of them are in the caches. A step processes tokens
// [n_computed, n_computed + n_new); when that reaches the end, the step's logits sample the next token.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cache/cache_manager.h"
#include "engine/engine.h"
#include "engine/mask_pool.h"
#include "engine/spec/acceptance.h"

namespace rill::engine {

class StopChecker;

struct Sequence {
  uint64_t id = 0;
  std::vector<int32_t> tokens;  // prompt, then generated
  int32_t n_prompt = 0;
  int32_t reported_prompt_tokens = 0;
  int32_t n_computed = 0;
  int32_t n_cached =
      -1;  // prompt tokens taken from the prefix cache at its first admission; -1: not admitted yet
  SamplingParams params;
  uint64_t seed = 0;
  cache::SequenceCache cache;
  std::shared_ptr<RequestStream> stream;
  std::unique_ptr<StopChecker> stop;
  std::map<int32_t, int32_t> output_counts;  // generated token -> occurrences (penalties)
  std::set<int32_t> prompt_tokens;           // distinct prompt tokens (repetition penalty)
  // The request's constraint and its next-token mask (computed off the engine thread); told every sampled
  // token.
  std::shared_ptr<ConstraintMask> constraint;
  int32_t n_preemptions = 0;
  // Disk tier: its prefix was looked up past the host tier (and read in) for its coming admission.
  bool disk_staged = false;
  // Speculative decoding: drafts are proposed for it (the engine has a drafter; engine/README.md), until its
  // acceptance stays below break-even (spec::AcceptanceAverage).
  bool speculates = false;
  spec::AcceptanceAverage acceptance;
  // Its last step rejected a draft: the slot went back to the checkpoint, and the tokens committed since are
  // fed again (with decode's priority) before it drafts on.
  bool rolled_back = false;
  int32_t max_new_tokens = 0;       // params.max_tokens clamped to the context left
  bool last_is_stop_token = false;  // the last sampled token ended the sequence (its text is not emitted)
  bool stopped_on_string = false;   // a stop string ended it (text after the stop string is dropped)
  std::chrono::steady_clock::time_point arrival;
  // The start of the first step that scheduled it and the end of the one that sampled its first token
  // (StreamEvent::queue_seconds / prefill_seconds); preemptions do not reset them.
  std::optional<std::chrono::steady_clock::time_point> first_scheduled, first_token;

  int32_t n_generated() const { return int32_t(tokens.size()) - n_prompt; }
  int32_t n_remaining() const { return int32_t(tokens.size()) - n_computed; }  // tokens still to process
  // A token may be sampled for it in this step: unconstrained, or its mask is ready.
  bool can_sample() const { return !constraint || constraint->ready(); }
  bool uses_penalties() const {
    return params.presence_penalty != 0 || params.frequency_penalty != 0 || params.repetition_penalty != 1;
  }
};

}  // namespace rill::engine
