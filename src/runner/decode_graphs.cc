#include "runner/decode_graphs.h"

#include <algorithm>

namespace rill::runner {

std::vector<int> decode_graph_buckets(int max_batch_size) {
  std::vector<int> b;
  for (int n = 1; n < max_batch_size; n *= 2) b.push_back(n);
  b.push_back(max_batch_size);
  return b;
}

Result<DecodeGraphs> DecodeGraphs::create(backend::Backend& be, int max_batch_size, int max_context,
                                          int block_size, int32_t pad_slot, int32_t pad_block, bool capture,
                                          int max_tokens_per_seq, int64_t max_step_tokens) {
  if (capture && !be.can_capture()) return unimplemented("the {} backend has no graphs", be.name());
  DecodeGraphs g;
  g.capture_ = capture;
  g.buckets_ = decode_graph_buckets(max_batch_size);
  g.pad_slot_ = pad_slot;
  g.pad_block_ = pad_block;
  g.max_tokens_per_seq_ = std::max(1, max_tokens_per_seq);
  g.block_size_ = block_size;
  g.max_step_tokens_ = max_step_tokens;
  g.block_table_stride_ = (max_context + block_size - 1) / block_size;
  RILL_ASSIGN_OR_RETURN(g.layout_, be.allocate(backend::Backend::fixed_layout_bytes(
                                       max_batch_size, max_batch_size * g.max_tokens_per_seq_,
                                       g.block_table_stride_)));
  return g;
}

int DecodeGraphs::tokens_per_seq(const model::StepBatch& batch) const {
  if (batch.seqs.empty()) return 0;
  const int q = batch.seqs.front().n_new;
  // A padding sequence's q tokens sit in the one padding block.
  if (q < 1 || q > max_tokens_per_seq_ || q > block_size_) return 0;
  for (const model::SequenceStep& s : batch.seqs) {
    const bool rows_ok = q == 1 ? s.logits == model::LogitsNeeded::Last
                                : s.logits == model::LogitsNeeded::LastN && s.n_logits == q;
    if (s.n_new != q || !rows_ok || !s.kda_snapshots.empty() || int(s.block_table.size()) > block_table_stride_)
      return 0;
  }
  return q;
}

int DecodeGraphs::bucket(const model::Model& m, const model::StepBatch& batch) const {
  const int q = tokens_per_seq(batch);
  if (m.tapping() || q == 0) return 0;
  const int n = int(batch.seqs.size());
  for (int b : buckets_)
    if (b >= n) return int64_t(b) * q <= max_step_tokens_ ? b : 0;
  return 0;
}

Result<TensorView> DecodeGraphs::run(model::Model& m, const model::ModelCaches& caches,
                                     const model::StepBatch& batch) {
  const int bucket = this->bucket(m, batch);
  if (bucket == 0)
    return internal_error("decode graphs: a step of {} sequences that cannot replay", batch.seqs.size());
  const int q = tokens_per_seq(batch);
  ++steps_;
  model::StepBatch padded = batch;
  for (int i = int(batch.seqs.size()); i < bucket; ++i) {
    model::SequenceStep pad = batch.seqs.front();  // the same q tokens and logits rows
    pad.start_pos = 0;
    pad.state_slot = pad_slot_;
    pad.kda_records = false;  // the padding slot has no records (and starts at 0); it runs in place
    pad.block_table = {pad_block_};
    padded.seqs.push_back(std::move(pad));
    padded.token_ids.insert(padded.token_ids.end(), size_t(q), 0);
  }
  RILL_TRY(padded.to_layout(caches.block_size, &layout_host_));
  layout_host_.count_only_plan = true;  // a replay must be right for any context of these counts
  const model::Model::FixedInputs fixed{layout_.data(), layout_.size(), block_table_stride_};
  RILL_TRY(m.prepare(padded, layout_host_, caches, &fixed));
  const int64_t rows = int64_t(batch.seqs.size()) * q;  // the padding sequences' rows come after
  if (!capture_) {
    RILL_ASSIGN_OR_RETURN(TensorView logits, m.run_prepared(caches));
    return logits.narrow(0, 0, rows);
  }
  const std::pair<int, int> key{bucket, q};
  auto it = graphs_.find(key);
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
    return internal_error("decode graph for batch {} x {} tokens: the captured step's logits moved", bucket, q);
  graphs_.emplace(key, std::move(g));
  return logits.narrow(0, 0, rows);  // the padding rows' logits are never read
}

}  // namespace rill::runner
