#include "runner/decode_graphs.h"

namespace rill::runner {

std::vector<int> decode_graph_buckets(int max_batch_size) {
  std::vector<int> b;
  for (int n = 1; n < max_batch_size; n *= 2) b.push_back(n);
  b.push_back(max_batch_size);
  return b;
}

Result<DecodeGraphs> DecodeGraphs::create(backend::Backend& be, int max_batch_size, int max_context,
                                          int block_size, int32_t pad_slot, int32_t pad_block, bool capture) {
  if (capture && !be.can_capture()) return unimplemented("the {} backend has no graphs", be.name());
  DecodeGraphs g;
  g.capture_ = capture;
  g.buckets_ = decode_graph_buckets(max_batch_size);
  g.pad_slot_ = pad_slot;
  g.pad_block_ = pad_block;
  g.block_table_stride_ = (max_context + block_size - 1) / block_size;
  RILL_ASSIGN_OR_RETURN(g.layout_, be.allocate(backend::Backend::fixed_layout_bytes(
                                       max_batch_size, max_batch_size, g.block_table_stride_)));
  return g;
}

int DecodeGraphs::bucket(const model::Model& m, const model::StepBatch& batch) const {
  if (m.tapping() || batch.seqs.empty()) return 0;
  for (const model::SequenceStep& s : batch.seqs)
    if (s.n_new != 1 || s.logits != model::LogitsNeeded::Last || !s.kda_snapshots.empty() ||
        int(s.block_table.size()) > block_table_stride_)
      return 0;
  const int n = int(batch.seqs.size());
  for (int b : buckets_)
    if (b >= n) return b;
  return 0;
}

Result<TensorView> DecodeGraphs::run(model::Model& m, const model::ModelCaches& caches,
                                     const model::StepBatch& batch) {
  const int bucket = this->bucket(m, batch);
  if (bucket == 0)
    return internal_error("decode graphs: a step of {} sequences that cannot replay", batch.seqs.size());
  model::StepBatch padded = batch;
  for (int i = int(batch.seqs.size()); i < bucket; ++i) {
    model::SequenceStep pad;
    pad.n_new = 1;
    pad.state_slot = pad_slot_;
    pad.block_table = {pad_block_};
    padded.seqs.push_back(std::move(pad));
    padded.token_ids.push_back(0);
  }
  const model::Model::FixedInputs fixed{layout_.data(), layout_.size(), block_table_stride_};
  RILL_TRY(m.prepare(padded, caches, &fixed));
  const int64_t rows = int64_t(batch.seqs.size());
  if (!capture_) {
    RILL_ASSIGN_OR_RETURN(TensorView logits, m.run_prepared(caches));
    return logits.narrow(0, 0, rows);
  }
  auto it = graphs_.find(bucket);
  if (it != graphs_.end()) {
    RILL_TRY(it->second.work->replay());
    ++replays_;
    return it->second.logits.narrow(0, 0, rows);
  }
  RILL_ASSIGN_OR_RETURN(TensorView logits, m.run_prepared(caches));
  Graph g;
  RILL_ASSIGN_OR_RETURN(g.work, m.backend().capture([&]() -> Status {
    RILL_ASSIGN_OR_RETURN(g.logits, m.run_prepared(caches));
    return {};
  }));
  if (g.logits.data != logits.data)
    return internal_error("decode graph for batch {}: the captured step's logits moved", bucket);
  graphs_.emplace(bucket, std::move(g));
  return logits.narrow(0, 0, rows);  // the padding rows' logits are never read
}

}  // namespace rill::runner
