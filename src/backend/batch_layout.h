// BatchLayout: the ragged batch of one engine step as kernels see it. Tokens are flattened
// token-major; sequence s owns tokens [seq_token_start[s], seq_token_start[s+1]). Prefill chunks and
// decode tokens mix freely in one layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/kda_snapshot.h"

namespace rill::backend {

// The KDA snapshots a step takes inside itself (prefix caching): sequence s asks for requests[j], j in
// [seq_begin[s], seq_begin[s + 1]), in increasing pos, each a 64-token chunk boundary of its step
// (start_pos < pos < start_pos + n_new). Empty when the step asks for none; only backends whose
// kda_snapshots_in_step() is true read them.
struct KdaSnapshotsHost {
  std::vector<int32_t> seq_begin;            // [n_seqs + 1]
  std::vector<KdaSnapshotRequest> requests;  // [n_snapshots]
  bool empty() const { return requests.empty(); }
};

// The same requests where the backend's kernels read them (host memory for the CPU backend); null and 0 when
// the step asks for none.
struct KdaSnapshots {
  const int32_t* seq_begin = nullptr;            // [n_seqs + 1]
  const KdaSnapshotRequest* requests = nullptr;  // [n]
  int n = 0;
};

// Host-side description, built from a StepBatch (StepBatch::to_layout, once per step by the runner); the
// backend mirrors it on the device.
struct BatchLayoutHost {
  std::vector<int32_t> seq_token_start;  // [n_seqs + 1]
  std::vector<int32_t> seq_start_pos;    // [n_seqs]  tokens of the sequence already computed (cached)
  std::vector<int32_t> seq_state_slot;   // [n_seqs]  KDA state slot
  // [n_seqs] 1: the sequence's KDA writes replay records (speculative decoding's verify step with
  // kda_rollback "records") and leaves its state slot and conv window as they were; 0: updates them in place.
  std::vector<int32_t> seq_kda_records;
  std::vector<int32_t> block_tables;     // [n_seqs * max_blocks_per_seq] MLA cache block ids, -1 padded
  std::vector<int32_t> token_seq;        // [n_tokens] sequence index of each token
  std::vector<int32_t> token_pos;        // [n_tokens] absolute position of each token
  KdaSnapshotsHost kda_snapshots;
  int max_blocks_per_seq = 0;
  // Kernels size their launches from the counts (sequences, tokens per sequence) only, never from context
  // lengths — MLA decode then splits every sequence's keys into a fixed number of parts — so work captured
  // for one step replays correctly for any step of the same counts (the runner's decode graphs).
  bool count_only_plan = false;

  int n_seqs() const { return int(seq_start_pos.size()); }
  int n_tokens() const { return seq_token_start.empty() ? 0 : seq_token_start.back(); }
  int n_new(int s) const { return seq_token_start[s + 1] - seq_token_start[s]; }
};

// Pointers valid on the backend's device (host pointers for the CPU backend) plus host-side scalars used to
// size launches. `host` always points at the host description.
struct BatchLayout {
  int n_tokens = 0;
  int n_seqs = 0;
  int max_new_tokens = 0;  // largest n_new of any sequence
  int max_context = 0;     // largest start_pos + n_new
  int max_blocks_per_seq = 0;
  int block_size = 0;      // MLA tokens per cache block
  bool count_only_plan = false;  // BatchLayoutHost::count_only_plan
  const int32_t* seq_token_start = nullptr;  // [n_seqs + 1]
  const int32_t* seq_start_pos = nullptr;    // [n_seqs]
  const int32_t* seq_state_slot = nullptr;   // [n_seqs]
  const int32_t* seq_kda_records = nullptr;  // [n_seqs] BatchLayoutHost::seq_kda_records
  const int32_t* block_tables = nullptr;     // [n_seqs, max_blocks_per_seq]
  const int32_t* token_seq = nullptr;        // [n_tokens]
  const int32_t* token_pos = nullptr;        // [n_tokens]
  KdaSnapshots kda_snapshots;                // BatchLayoutHost::kda_snapshots
  const BatchLayoutHost* host = nullptr;
};

// The host-known scalars of a layout (counts, largest step and context); every backend's upload_layout
// starts from these, then points the arrays at its own copies.
inline BatchLayout layout_scalars(const BatchLayoutHost& host, int block_size) {
  BatchLayout l;
  l.n_seqs = host.n_seqs();
  l.n_tokens = host.n_tokens();
  l.max_blocks_per_seq = host.max_blocks_per_seq;
  l.block_size = block_size;
  l.count_only_plan = host.count_only_plan;
  for (int s = 0; s < l.n_seqs; ++s) {
    l.max_new_tokens = l.max_new_tokens > host.n_new(s) ? l.max_new_tokens : host.n_new(s);
    const int ctx = host.seq_start_pos[static_cast<std::size_t>(s)] + host.n_new(s);
    l.max_context = l.max_context > ctx ? l.max_context : ctx;
  }
  l.host = &host;
  return l;
}

}  // namespace rill::backend
