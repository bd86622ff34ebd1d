// StepBatch: the ragged batch of one engine step (design.md §4). Each sequence contributes `n_new` tokens
// starting at `start_pos` (prefill chunks and decode tokens mix), owns a KDA state slot and an MLA block
// table covering positions [0, start_pos + n_new), and says which logits it needs.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/batch_layout.h"
#include "core/status.h"

namespace rill::model {

// Which positions of a sequence's step produce logits rows: none, the last, every one, or the last
// `SequenceStep::n_logits` (speculative decoding's verify step: the committed token and the drafts after it).
enum class LogitsNeeded : uint8_t { None, Last, All, LastN };

// The chunk length of the chunked KDA algorithm (spec §3.3): states exist between steps and at multiples of
// it from a step's start.
inline constexpr int32_t kKdaChunk = 64;

// Prefix caching's in-step snapshots: one concept, defined where the kernels read it.
using backend::KdaSnapshotRequest;

struct SequenceStep {
  int32_t start_pos = 0;  // tokens of this sequence already in the caches
  int32_t n_new = 0;      // tokens in this step (their ids are consecutive in StepBatch::token_ids)
  int32_t state_slot = 0;
  std::vector<int32_t> block_table;  // MLA blocks for positions [0, start_pos + n_new), in order
  LogitsNeeded logits = LogitsNeeded::Last;
  int32_t n_logits = 0;  // LogitsNeeded::LastN only: 1 <= n_logits <= n_new
  // The logits rows this sequence contributes.
  int32_t n_logit_rows() const {
    switch (logits) {
      case LogitsNeeded::None:
        return 0;
      case LogitsNeeded::Last:
        return 1;
      case LogitsNeeded::All:
        return n_new;
      case LogitsNeeded::LastN:
        return n_logits;
    }
    return 0;
  }
  // In increasing pos; each a multiple of the KDA chunk (64) past start_pos and before start_pos + n_new.
  std::vector<KdaSnapshotRequest> kda_snapshots;
  // Speculative decoding's rollback by replay records (kda_rollback "records"): this step's KDA leaves the
  // slot's state and conv window as they were and writes a record per token into the slot's record buffers
  // (LayerCache::kda_records); the runner folds the committed tokens' records in afterwards (CacheOps'
  // KdaFold). Needs start_pos > 0 and no in-step snapshots.
  bool kda_records = false;
};

struct StepBatch {
  std::vector<int32_t> token_ids;  // every sequence's new tokens, sequence after sequence
  std::vector<SequenceStep> seqs;

  int n_tokens() const { return int(token_ids.size()); }
  int n_logit_rows() const;
  // Checks counts against the token list, each block table against its context and the snapshot requests
  // against the step; fills the host layout (the runner, once per step).
  Status to_layout(int block_size, backend::BatchLayoutHost* out) const;
  // The token index (row of the step's hidden states) of each logits row, in sequence order.
  std::vector<int32_t> logit_token_rows() const;
};

}  // namespace rill::model
