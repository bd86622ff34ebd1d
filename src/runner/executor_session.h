// ExecutorSession: one sequence fed through an Executor — one rank or a sharded world, the caller cannot tell
// — with every fed position's logits back on the host. The engine-free path of the scoring commands (`rill
// logits`, `rill perplexity`) and of `rill bench`'s sharded step rows, so `-tp N` runs there as in serve.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runner/executor.h"

namespace rill::runner {

// The runner options a scoring run asks for: one sequence of up to `max_context` tokens fed `chunk` tokens a
// step (0: the whole context, capped at 4096), every position's logits, no prefix caching, no graphs, cache
// blocks for exactly that context.
RunnerOptions scoring_runner_options(int max_context, int chunk);

class ExecutorSession {
 public:
  // The sequence uses state slot 0 and MLA blocks 0, 1, ... of `ex`'s caches (nothing else may run on them).
  static Result<ExecutorSession> create(Executor& ex, int max_context);

  // Appends `ids` in steps of at most `chunk` tokens (0: the executor's step limit). Returns the F32 logits of
  // every fed position, [ids.size() * vocab] row-major, as the model produced them (greedy rows: no sampling
  // control touches them).
  Result<std::vector<float>> feed(std::span<const int32_t> ids, int chunk);

  // Starts a new sequence on the same slot and blocks (a start position of 0 ignores the old state).
  void restart() { position_ = 0; }
  int position() const { return position_; }

 private:
  ExecutorSession(Executor& ex, int max_context) : ex_(&ex), max_context_(max_context) {}
  Executor* ex_;
  int max_context_;
  int position_ = 0;
};

}  // namespace rill::runner
