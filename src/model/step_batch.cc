#include "model/step_batch.h"

#include <algorithm>

namespace rill::model {

int StepBatch::n_logit_rows() const {
  int n = 0;
  for (const auto& s : seqs) n += s.n_logit_rows();
  return n;
}

std::vector<int32_t> StepBatch::logit_token_rows() const {
  std::vector<int32_t> rows;
  int32_t t0 = 0;
  for (const auto& s : seqs) {
    // The last n_logit_rows() positions of the sequence's tokens, in order.
    for (int i = s.n_new - s.n_logit_rows(); i < s.n_new; ++i) rows.push_back(t0 + i);
    t0 += s.n_new;
  }
  return rows;
}

Status StepBatch::to_layout(int block_size, backend::BatchLayoutHost* out) const {
  backend::BatchLayoutHost& l = *out;
  l = backend::BatchLayoutHost{};
  int max_blocks = 0;
  int64_t total = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SequenceStep& q = seqs[s];
    if (q.n_new < 1) return invalid_argument("step: sequence {} has no new tokens", s);
    if (q.start_pos < 0) return invalid_argument("step: sequence {} has negative start position", s);
    if (q.logits == LogitsNeeded::LastN && (q.n_logits < 1 || q.n_logits > q.n_new))
      return invalid_argument(
          "step: sequence {} asks for the logits of its last {} positions but has {} new tokens", s,
          q.n_logits, q.n_new);
    const int64_t need = (int64_t(q.start_pos) + q.n_new + block_size - 1) / block_size;
    if (int64_t(q.block_table.size()) < need)
      return invalid_argument("step: sequence {} covers {} positions but has {} blocks of {}", s,
                              q.start_pos + q.n_new, q.block_table.size(), block_size);
    if (q.kda_records && (q.start_pos == 0 || !q.kda_snapshots.empty()))
      return invalid_argument("step: sequence {} writes KDA replay records but {}", s,
                              q.start_pos == 0 ? "starts at position 0 (records fold onto a computed state)"
                                               : "also asks for in-step snapshots");
    max_blocks = std::max(max_blocks, int(q.block_table.size()));
    total += q.n_new;
    int32_t prev = q.start_pos;
    for (const KdaSnapshotRequest& r : q.kda_snapshots) {
      if (r.pos <= prev || r.pos >= q.start_pos + q.n_new || (r.pos - q.start_pos) % kKdaChunk != 0 ||
          r.slot < 0)
        return invalid_argument(
            "step: sequence {} asks for a KDA snapshot after position {} in slot {} (its step "
            "covers [{}, {}); snapshots must be increasing {}-token chunk boundaries inside it)",
            s, r.pos, r.slot, q.start_pos, q.start_pos + q.n_new, kKdaChunk);
      prev = r.pos;
    }
  }
  if (total != int64_t(token_ids.size()))
    return invalid_argument("step: sequences hold {} tokens but the batch has {} ids", total,
                            token_ids.size());
  l.max_blocks_per_seq = std::max(max_blocks, 1);
  l.seq_token_start.push_back(0);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SequenceStep& q = seqs[s];
    l.seq_start_pos.push_back(q.start_pos);
    l.seq_state_slot.push_back(q.state_slot);
    l.seq_kda_records.push_back(q.kda_records ? 1 : 0);
    for (int b = 0; b < l.max_blocks_per_seq; ++b)
      l.block_tables.push_back(b < int(q.block_table.size()) ? q.block_table[b] : -1);
    for (int i = 0; i < q.n_new; ++i) {
      l.token_seq.push_back(int32_t(s));
      l.token_pos.push_back(q.start_pos + i);
    }
    l.seq_token_start.push_back(l.seq_token_start.back() + q.n_new);
  }
  backend::KdaSnapshotsHost& snaps = l.kda_snapshots;
  snaps.seq_begin.push_back(0);
  for (const SequenceStep& q : seqs) {
    snaps.requests.insert(snaps.requests.end(), q.kda_snapshots.begin(), q.kda_snapshots.end());
    snaps.seq_begin.push_back(int32_t(snaps.requests.size()));
  }
  return {};
}

}  // namespace rill::model
