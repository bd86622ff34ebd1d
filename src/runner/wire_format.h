// The bytes the leader process and its worker processes exchange (ranks in several processes, issue #17):
// the runner options the leader's engine planned with, each step's StepBatch and CacheOps, and the reports
// and verdicts of start-up. Plain data in and out; the transport is dist/process_link.
//
// Layout: a 4-byte tag naming the message, a format version, then fixed-width little-endian fields and
// length-prefixed arrays (the processes run the same binary, but a decoder must still refuse bytes that are
// not what it expects instead of reading past them: a message names what is truncated or out of range).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cache/cache_ops.h"
#include "model/step_batch.h"
#include "runner/model_runner.h"

namespace rill::runner {

using Bytes = std::vector<uint8_t>;

// One step as the worker processes run it: no sampling controls (only the leader samples).
struct StepMessage {
  model::StepBatch batch;
  cache::CacheOps ops;
};
Bytes encode_step(const model::StepBatch& batch, const cache::CacheOps& ops);
Result<StepMessage> decode_step(std::span<const uint8_t> bytes);

// The options every rank's runner is made with (the leader's engine derives them from its flags). The
// prefix index's test-only hash function does not travel (it only matters to the leader's cache manager).
Bytes encode_runner_options(const RunnerOptions& o);
Result<RunnerOptions> decode_runner_options(std::span<const uint8_t> bytes);

// What a process tells the leader after setting up its ranks: its first failure (the message names the
// rank) or the cache plan its ranks agree on.
struct SetupReport {
  Status status;
  int n_blocks = 0, n_slots = 0, n_snapshots = 0;
};
Bytes encode_setup_report(const SetupReport& r);
Result<SetupReport> decode_setup_report(std::span<const uint8_t> bytes);

// The leader's answer: go on with `n_blocks` MLA blocks (every rank plans that many), or stop with `status`.
struct SetupVerdict {
  Status status;
  int n_blocks = 0;
};
Bytes encode_setup_verdict(const SetupVerdict& v);
Result<SetupVerdict> decode_setup_verdict(std::span<const uint8_t> bytes);

}  // namespace rill::runner
