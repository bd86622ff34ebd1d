// DecodeGraphs: decode steps replayed from CUDA graphs, one per batch-size bucket (design.md §4).
//
// A step whose sequences each bring one token (logits of the last, no in-step snapshot, no taps) is padded to
// the next bucket (1, 2, 4, 8, 16, ... up to the largest batch) and replayed from the graph captured for that
// bucket the first time it ran (that first step runs eagerly, warming what capture cannot do: cuBLASLt's
// algorithm timing, kernel attributes). Padding rows are inert: each is a one-token sequence at position 0 in
// a state slot and an MLA block that no sequence owns (at position 0 the KDA ops ignore the slot's contents,
// and all padding rows compute the same values); their logits are never sampled. The step inputs go to fixed
// addresses (the layout into a buffer owned here, the ids and rows at the workspace's fixed start), and the
// kernels plan from the counts only (BatchLayoutHost::count_only_plan), so a replay is right for any context.
#pragma once

#include <map>
#include <memory>
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
  static Result<DecodeGraphs> create(backend::Backend& be, int max_batch_size, int max_context,
                                     int block_size, int32_t pad_slot, int32_t pad_block,
                                     bool capture = true);

  // The bucket `batch` replays from, or 0 when it must run eagerly.
  int bucket(const model::Model& m, const model::StepBatch& batch) const;
  // Runs `batch` (bucket(m, batch) > 0) padded to its bucket; the logits of its own rows, [seqs, vocab].
  Result<TensorView> run(model::Model& m, const model::ModelCaches& caches, const model::StepBatch& batch);

  int captured() const { return int(graphs_.size()); }
  uint64_t replays() const { return replays_; }
  void clear() { graphs_.clear(); }

 private:
  struct Graph {
    std::unique_ptr<backend::CapturedWork> work;
    TensorView logits;  // [bucket, vocab] where a replay leaves them
  };
  DecodeGraphs() = default;

  std::vector<int> buckets_;
  std::map<int, Graph> graphs_;
  int32_t pad_slot_ = -1, pad_block_ = -1;
  bool capture_ = true;
  int block_table_stride_ = 0;
  backend::DeviceAllocation layout_;
  uint64_t replays_ = 0;
};

}  // namespace rill::runner
