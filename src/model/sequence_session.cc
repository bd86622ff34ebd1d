#include "model/sequence_session.h"

#include <algorithm>
#include <numeric>

namespace rill::model {

Result<SequenceSession> SequenceSession::create(Model& model, int max_context) {
  const int block = 64;
  const int n_blocks = std::max(1, (max_context + block - 1) / block);
  RILL_ASSIGN_OR_RETURN(ModelCaches caches, ModelCaches::allocate(model.backend(), model.config(), 1, n_blocks, block));
  return SequenceSession(model, std::move(caches));
}

Result<std::vector<float>> SequenceSession::feed(std::span<const int32_t> ids, int chunk, bool all_logits) {
  const int64_t V = model_->config().vocab_size;
  const int limit = std::min(model_->limits().max_tokens, all_logits ? model_->limits().max_logit_rows : INT32_MAX);
  chunk = chunk <= 0 ? limit : std::min(chunk, limit);
  if (position_ + int(ids.size()) > caches_.n_blocks * caches_.block_size)
    return out_of_range("sequence of {} tokens exceeds the session's context of {}", position_ + ids.size(),
                        caches_.n_blocks * caches_.block_size);
  std::vector<float> out;
  std::vector<int32_t> table(static_cast<size_t>(caches_.n_blocks));
  std::iota(table.begin(), table.end(), 0);
  for (size_t off = 0; off < ids.size(); off += size_t(chunk)) {
    const int n = int(std::min(ids.size() - off, size_t(chunk)));
    StepBatch b;
    b.token_ids.assign(ids.begin() + off, ids.begin() + off + n);
    SequenceStep s;
    s.start_pos = position_;
    s.n_new = n;
    s.state_slot = 0;
    s.block_table.assign(table.begin(), table.begin() + (position_ + n + caches_.block_size - 1) / caches_.block_size);
    const bool last_chunk = off + size_t(n) == ids.size();
    s.logits = all_logits ? LogitsNeeded::All : last_chunk ? LogitsNeeded::Last : LogitsNeeded::None;
    b.seqs.push_back(std::move(s));
    if (b.n_logit_rows() == 0) b.seqs[0].logits = LogitsNeeded::Last;  // forward always yields a row
    RILL_ASSIGN_OR_RETURN(TensorView logits, model_->forward(b, caches_));
    position_ += n;
    last_logits_ = logits.rows(logits.size(0) - 1, 1);
    if (all_logits || last_chunk) {
      const size_t old = out.size();
      const size_t rows = all_logits ? size_t(n) : 1;
      if (!all_logits) out.clear();
      out.resize((all_logits ? old : 0) + rows * size_t(V));
      const TensorView src = all_logits ? logits : last_logits_;
      RILL_TRY(model_->backend().copy_to_host(out.data() + (all_logits ? old : 0), src.data, rows * size_t(V) * 4));
    }
  }
  return out;
}

Result<int32_t> SequenceSession::sample(const backend::SamplingRow& row) {
  if (last_logits_.empty()) return internal_error("sample before any token was fed");
  std::vector<int32_t> ids;
  RILL_TRY(model_->sample(last_logits_, std::span<const backend::SamplingRow>(&row, 1), &ids));
  return ids[0];
}

}  // namespace rill::model
