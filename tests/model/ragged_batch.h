// Ragged-batch equality, shared by the Kimi Linear and Kimi K3 tests on both backends: several sequences
// advanced together in mixed steps (long prefill chunks, short chunks, single tokens), with state slots in the
// reverse order of the sequences, give the logits of each sequence fed alone, in the same chunks, through a
// SequenceSession — bit for bit on the CPU (expect_ragged_batch_equals_alone), within bf16 rounding on the GPU
// (logit_compare.h's expect_ragged_batch_close_to_alone).
#pragma once

#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "model/fixture.h"
#include "model/model.h"
#include "model/sequence_session.h"

namespace rill::testing {

struct RaggedPiece {
  int seq, n;  // n tokens of sequence `seq` in this step (0: absent)
};

// Per sequence, all its logits rows: from the batched steps and from the sequence fed alone.
struct RaggedRun {
  std::vector<std::vector<float>> batched, alone;
};

// Runs `steps` over `tokens` (every sequence's tokens, all consumed by the steps), then each sequence alone.
// Fails (fatally, so callers check HasFatalFailure) if a forward pass does.
inline void run_ragged_batch(backend::Backend& be, model::Model& model, const std::vector<std::vector<int32_t>>& tokens,
                             const std::vector<std::vector<RaggedPiece>>& steps, RaggedRun* out) {
  const int64_t V = model.config().vocab_size;
  const int n_seqs = int(tokens.size()), block = 64, blocks_per_seq = 4;
  auto caches = model::ModelCaches::allocate(be, model.config(), n_seqs, n_seqs * blocks_per_seq, block);
  ASSERT_TRUE(caches.ok());
  const size_t n = static_cast<size_t>(n_seqs);
  std::vector<int> pos(n, 0);
  std::vector<std::vector<int>> chunks(n);  // each sequence's chunk sizes, to replay alone
  out->batched.assign(n, {});
  out->alone.assign(n, {});
  for (const auto& step : steps) {
    model::StepBatch b;
    std::vector<int> seq_of;
    for (const RaggedPiece& p : step) {
      if (p.n == 0) continue;
      model::SequenceStep s;
      s.start_pos = pos[size_t(p.seq)];
      s.n_new = p.n;
      s.state_slot = n_seqs - 1 - p.seq;  // slots in a different order from the sequences
      for (int k = 0; k < blocks_per_seq; ++k) s.block_table.push_back(p.seq * blocks_per_seq + k);
      s.logits = model::LogitsNeeded::All;
      b.token_ids.insert(b.token_ids.end(), tokens[size_t(p.seq)].begin() + s.start_pos,
                         tokens[size_t(p.seq)].begin() + s.start_pos + p.n);
      b.seqs.push_back(s);
      seq_of.push_back(p.seq);
      chunks[size_t(p.seq)].push_back(p.n);
      pos[size_t(p.seq)] += p.n;
    }
    auto logits = model.forward(b, *caches);
    ASSERT_TRUE(logits.ok()) << logits.status().to_string();
    std::vector<float> host(static_cast<size_t>(logits->numel()));
    ASSERT_TRUE(be.copy_to_host(host.data(), logits->data, host.size() * 4).ok());
    size_t row = 0;
    for (size_t i = 0; i < b.seqs.size(); ++i) {
      auto& dst = out->batched[size_t(seq_of[i])];
      const size_t rows = size_t(b.seqs[i].n_new);
      dst.insert(dst.end(), host.begin() + int64_t(row * size_t(V)), host.begin() + int64_t((row + rows) * size_t(V)));
      row += rows;
    }
  }
  for (int s = 0; s < n_seqs; ++s) {
    ASSERT_EQ(pos[size_t(s)], int(tokens[size_t(s)].size()));
    auto alone = model::SequenceSession::create(model, 512);
    ASSERT_TRUE(alone.ok());
    size_t off = 0;
    for (int len : chunks[size_t(s)]) {
      auto l = alone->feed(std::span<const int32_t>(tokens[size_t(s)].data() + off, size_t(len)), len, true);
      ASSERT_TRUE(l.ok()) << l.status().to_string();
      out->alone[size_t(s)].insert(out->alone[size_t(s)].end(), l->begin(), l->end());
      off += size_t(len);
    }
  }
}

// The CPU check: bit-for-bit equal.
inline void expect_ragged_batch_equals_alone(backend::Backend& be, model::Model& model,
                                             const std::vector<std::vector<int32_t>>& tokens,
                                             const std::vector<std::vector<RaggedPiece>>& steps) {
  RaggedRun r;
  run_ragged_batch(be, model, tokens, steps, &r);
  if (::testing::Test::HasFatalFailure()) return;
  for (size_t s = 0; s < tokens.size(); ++s)
    EXPECT_EQ(max_abs_diff(r.alone[s], r.batched[s]), 0.0f) << "sequence " << s;
}

}  // namespace rill::testing
