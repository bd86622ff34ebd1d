// Whole-model benchmarks (prefill and decode steps through Model::forward), per-layer-type differences of such
// steps, and per-op benchmarks at a model's shape, plus the ceilings they are judged against. Used by
// `rill bench`.
#pragma once

#include <vector>

#include "bench/driver/bench_report.h"
#include "model/model.h"

namespace rill::bench {

struct BenchOptions {
  std::vector<int> decode_batches = {1, 8, 32, 128, 256};
  int decode_context = 4096;
  int prefill_long = 8192;      // one prompt of this many tokens
  int prefill_batch = 8;        // ... and this many prompts of prefill_short tokens in one step (0: none)
  int prefill_short = 2048;
  int repeats = 5;              // timed repetitions (median), after one warm-up
  // Speculative decoding's verify step (issue #21): every sequence feeds its committed token and k drafts at
  // decode_context with logits at all k + 1 positions, for each k and batch; beside a plain decode step.
  std::vector<int> verify_drafts = {1, 2, 4, 8};
  std::vector<int> verify_batches = {1, 8, 64};
};

// Device-to-device copy bandwidth and a large bf16 GEMM rate, measured on the backend.
Result<Ceilings> measure_ceilings(backend::Backend& be);
// The host <-> device copy ceiling: `bytes` between pinned host memory (allocate_host) and the device in one
// piece through the host tier's own path (copy_host_tier_batch), median of 5, in GB/s; `to_host`: device ->
// host. The prefix-cache benches judge the tier's copies against it.
Result<double> host_copy_ceiling_gbps(backend::Backend& be, size_t bytes, bool to_host);

// Prefill (one long prompt; a batch of shorter ones) and decode steps at a fixed context for each batch size,
// then verify steps (section "verify") against the decode step of the same batch.
Result<std::vector<BenchRow>> bench_model(model::Model& m, const BenchOptions& o);

// Per layer type, by timing slices: for each layer kind of `c` (KDA, MLA), the prefill and decode steps of
// bench_model on a 2-layer model (c's first layer, then one of the kind) minus the same steps on c's first layer
// alone, both with dummy weights (`seed`) at c's full width and loaded one at a time: the marginal time, bytes
// and FLOPs of one more layer, with embedding, lm_head and sampling cancelled. Rows of section "layer".
Result<std::vector<BenchRow>> bench_layer_kinds(backend::Backend& be, const model::ModelConfig& c,
                                                const BenchOptions& o, uint64_t seed);

// The model's heaviest ops one by one at its shape: GEMM, KDA chunk and step, MLA prefill and decode, MoE.
Result<std::vector<BenchRow>> bench_ops(backend::Backend& be, const model::ModelConfig& c, const BenchOptions& o);

}  // namespace rill::bench
