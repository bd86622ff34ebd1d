// Whole-model benchmarks (prefill and decode steps through Model::forward) and per-op benchmarks at a model's
// shape, plus the ceilings they are judged against. Used by `rill bench`.
#pragma once

#include <vector>

#include "bench/driver/bench_report.h"
#include "model/model.h"

namespace rill::bench {

struct BenchOptions {
  std::vector<int> decode_batches = {1, 8, 32, 128, 256};
  int decode_context = 4096;
  int prefill_long = 8192;      // one prompt of this many tokens
  int prefill_batch = 8;        // ... and this many prompts of prefill_short tokens in one step
  int prefill_short = 2048;
  int repeats = 5;              // timed repetitions (median), after one warm-up
};

// Device-to-device copy bandwidth and a large bf16 GEMM rate, measured on the backend.
Result<Ceilings> measure_ceilings(backend::Backend& be);

// Prefill (one long prompt; a batch of shorter ones) and decode steps at a fixed context for each batch size.
Result<std::vector<BenchRow>> bench_model(model::Model& m, const BenchOptions& o);

// The model's heaviest ops one by one at its shape: GEMM, KDA chunk and step, MLA prefill and decode, MoE.
Result<std::vector<BenchRow>> bench_ops(backend::Backend& be, const model::ModelConfig& c, const BenchOptions& o);

}  // namespace rill::bench
