// DecodeGraphs: decode and verify steps replayed from CUDA graphs, one per (batch-size bucket, tokens per
// sequence) (design.md §4).
//
// A step whose sequences each bring the same number q of tokens — q = 1 with the logits of the last (decode),
// or 1 < q <= max_tokens_per_seq with the logits of all q (speculative decoding's verify step: the committed
// token and its drafts, vLLM's uniform decode query length) — and no in-step snapshot or taps is padded to the
// next bucket (1, 2, 4, 8, 16, ... up to the largest batch) and replayed from the graph captured for that
// (bucket, q) the first time it ran (that first step runs eagerly, warming what capture cannot do: cuBLASLt's
// algorithm timing, kernel attributes). A verify step whose sequences brought different draft counts runs
// eagerly. Padding rows are inert: each is a q-token sequence at position 0 in a state slot and an MLA block
// that no sequence owns (at position 0 the KDA ops ignore the slot's contents, and all padding rows compute
// the same values); their logits are never sampled. The step inputs go to fixed
// addresses (the layout into a buffer owned here, the ids and rows at the workspace's fixed start), and the
// kernels plan from the counts only (BatchLayoutHost::count_only_plan), so a replay is right for any context.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "model/model.h"

namespace rill::runner {

// The buckets: powers of two below `max_batch_size`, then it.
std::vector<int> decode_graph_buckets(int max_batch_size);

class DecodeGraphs {
 public:
  // `pad_slot` and `pad_block`: a state slot and an MLA block of `caches` that nothing else uses;
  // `max_context`: the longest sequence (it sets the block tables' fixed stride). `capture` false: every step
  // runs padded, with the fixed inputs, but eagerly — what a replay must reproduce bit for bit, on any
  // backend (RunnerOptions::capture_graphs).
  // `max_tokens_per_seq`: the largest q (1 + the speculative tokens a sequence may bring); `max_step_tokens`:
  // a padded step of more tokens (bucket x q) runs eagerly (the runner's Backend::graph_max_expert_pairs).
  static Result<DecodeGraphs> create(backend::Backend& be, int max_batch_size, int max_context,
                                     int block_size, int32_t pad_slot, int32_t pad_block,
                                     bool capture = true, int max_tokens_per_seq = 1,
                                     int64_t max_step_tokens = INT64_MAX);

  // The bucket `batch` replays from, or 0 when it must run eagerly.
  int bucket(const model::Model& m, const model::StepBatch& batch) const;
  // Runs `batch` (bucket(m, batch) > 0, Model::check_step passed) padded to its bucket, whose layout it builds
  // (StepBatch::to_layout); the logits of its own rows, [rows, vocab].
  Result<TensorView> run(model::Model& m, const model::ModelCaches& caches, const model::StepBatch& batch);

  int captured() const { return int(graphs_.size()); }
  uint64_t replays() const { return replays_; }
  uint64_t steps() const { return steps_; }
  int64_t max_step_tokens() const { return max_step_tokens_; }  // steps run through run(): replayed, captured or padded eagerly
  void clear() { graphs_.clear(); }

 private:
  struct Graph {
    std::unique_ptr<backend::CapturedWork> work;
    TensorView logits;  // [bucket, vocab] where a replay leaves them
  };
  DecodeGraphs() = default;

  // The tokens every sequence of `batch` brings when the step can replay (uniform, within the limits), else 0.
  int tokens_per_seq(const model::StepBatch& batch) const;

  std::vector<int> buckets_;
  std::map<std::pair<int, int>, Graph> graphs_;  // by (bucket, tokens per sequence)
  int32_t pad_slot_ = -1, pad_block_ = -1;
  int max_tokens_per_seq_ = 1, block_size_ = 0;
  int64_t max_step_tokens_ = INT64_MAX;
  bool capture_ = true;
  int block_table_stride_ = 0;
  backend::DeviceAllocation layout_;
  backend::BatchLayoutHost layout_host_;  // the padded step's, alive through its launches
  uint64_t replays_ = 0, steps_ = 0;
};

}  // namespace rill::runner
