// Prefill and decode steps through an Executor: `rill bench -tp N` (and -pp, -ep), where the ranks run the step
// together and Model::forward on one model is not what serving runs.
#pragma once

#include <vector>

#include "bench/driver/model_bench.h"
#include "runner/executor.h"

namespace rill::bench {

// The runner options the executor must be opened with for `o`'s steps (slots, blocks, step sizes; no graphs,
// no prefix caching).
runner::RunnerOptions executor_bench_runner_options(const BenchOptions& o);

// Section "sharded": the prefill of one o.prefill_long prompt and a decode step at o.decode_context for each of
// o.decode_batches, each the median of o.repeats host-timed executions (a step returns its sampled tokens, so
// the time covers every rank's work and the leader's sampling). Bytes and FLOPs are rank 0's (its shard of the
// weights and caches, step_cost.h's estimates), so the ceiling fractions read per GPU. `label` names the mapping.
Result<std::vector<BenchRow>> bench_executor_steps(runner::Executor& ex, const BenchOptions& o,
                                                   const std::string& label);

}  // namespace rill::bench
