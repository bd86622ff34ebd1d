// A randomised schedule of steps on the tiny Kimi Linear model for comparing runners (decode graphs against
// eager execution): sixteen sequences of random prompts; half prefill first, then decode-only steps of every
// size 1..16 (each graph bucket, with and without padding rows) on random subsets, so sequences join and
// leave between steps, with every third step also carrying a 48-token prefill chunk of a sequence not yet
// prefilled; then the rest of the prompts and one decode step of every size over all sixteen sequences; then
// speculative verify steps (every sequence brings its next token and k drafts, logits at all k + 1) of every
// size for k = 1 and k = 3, and one verify step whose sequences bring different draft counts (no graph
// replays that one). Drafts are random tokens, all kept: only the logits are compared. Every runner gets the
// same steps; the first runner's greedy tokens extend the sequences.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "model/fixture.h"
#include "runner/model_runner.h"

namespace rill::runner::testing {

constexpr int kMaxBatch = 16, kMaxLen = 1024, kBlock = 64, kBlocksPerSeq = kMaxLen / kBlock, kMaxDrafts = 3;

// A runner of tiny_b with room for the schedule; `eager`: no decode graphs; `capture`:
// RunnerOptions::capture_graphs.
inline std::unique_ptr<ModelRunner> make_schedule_runner(backend::Backend& be, bool eager, bool capture) {
  auto m = model::load_model(rill::testing::data_dir() / "kimi_linear_tiny_b", be);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return nullptr;
  RunnerOptions o;
  o.max_batch_size = kMaxBatch;
  o.max_num_tokens = 512;
  o.max_model_len = kMaxLen;
  o.num_kv_blocks = kMaxBatch * kBlocksPerSeq;
  o.enforce_eager = eager;
  o.capture_graphs = capture;
  o.num_speculative_tokens = kMaxDrafts;
  auto r = ModelRunner::create(std::move(m).value(), o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}

inline double rel_l2(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i)
    num += double(a[i] - b[i]) * (a[i] - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / std::max(den, 1e-30));
}

struct ScheduleStats {
  int steps = 0;
  std::set<int> decode_buckets;                  // graph buckets of the decode-only steps
  std::set<std::pair<int, int>> verify_buckets;  // (bucket, k + 1) of the uniform verify steps
  int graphable_steps = 0;                       // decode-only and uniform verify steps
};

// One step's outputs, one per runner; `decode_only`: every sequence brought one token.
using StepCheck = std::function<void(int step, bool decode_only, const std::vector<StepOutput>& outs)>;

// Runs the schedule (seeded by `seed`) through `runners`, calling `check` after every step; stops at the
// first failure (a runner error fails the test).
inline ScheduleStats run_schedule(const std::vector<ModelRunner*>& runners, uint64_t seed,
                                  const StepCheck& check) {
  struct Seq {
    std::vector<int32_t> tokens;
    int n_computed = 0;
  };
  std::mt19937 rng{uint32_t(seed)};
  const int vocab = int(runners[0]->model().config().vocab_size);
  std::vector<Seq> seqs(kMaxBatch);
  for (Seq& s : seqs) {
    s.tokens.resize(size_t(1 + rng() % 300));
    for (int32_t& t : s.tokens) t = int32_t(rng() % uint32_t(vocab));
  }
  ScheduleStats stats;
  const std::vector<int> buckets = decode_graph_buckets(kMaxBatch);
  // Sequence i lives in state slot i and MLA blocks i * kBlocksPerSeq ...
  // `verify`: each part (i, n) is a verify step of sequence i: its next token and n - 1 drafts (drawn here and
  // appended to its tokens), logits at all n.
  auto step = [&](const std::vector<std::pair<int, int>>& parts, bool verify = false) {
    model::StepBatch b;
    SamplingBatch sb;
    sb.want_logits = true;
    std::set<int> in_step;
    for (auto [i, n] : parts)
      ASSERT_TRUE(in_step.insert(i).second) << "sequence " << i << " twice in one step";
    for (auto [i, n] : parts) {
      Seq& s = seqs[size_t(i)];
      if (verify)
        for (int d = 1; d < n; ++d) s.tokens.push_back(int32_t(rng() % uint32_t(vocab)));
      model::SequenceStep q;
      q.start_pos = s.n_computed;
      q.n_new = n;
      if (verify) {
        q.logits = model::LogitsNeeded::LastN;
        q.n_logits = n;
      }
      q.state_slot = i;
      for (int k = 0; k < (s.n_computed + n + kBlock - 1) / kBlock; ++k)
        q.block_table.push_back(i * kBlocksPerSeq + k);
      b.seqs.push_back(std::move(q));
      b.token_ids.insert(b.token_ids.end(), s.tokens.begin() + s.n_computed,
                         s.tokens.begin() + s.n_computed + n);
      for (int r = 0; r < (verify ? n : 1); ++r) sb.rows.push_back(RowSampling{});
    }
    const bool decode_only =
        !verify && std::all_of(parts.begin(), parts.end(), [](auto p) { return p.second == 1; });
    const int bucket = *std::find_if(buckets.begin(), buckets.end(), [&](int k) { return k >= int(parts.size()); });
    const bool uniform_verify =
        verify && std::all_of(parts.begin(), parts.end(), [&](auto p) { return p.second == parts[0].second; });
    if (decode_only) stats.decode_buckets.insert(bucket);
    if (uniform_verify) stats.verify_buckets.insert({bucket, parts[0].second});
    stats.graphable_steps += decode_only || uniform_verify;
    std::vector<StepOutput> outs;
    for (ModelRunner* r : runners) {
      auto o = r->execute(b, sb, {});
      ASSERT_TRUE(o.ok()) << o.status().to_string();
      outs.push_back(std::move(o).value());
    }
    check(stats.steps, decode_only, outs);
    size_t row = 0;  // the sequence's last logits row
    for (size_t r = 0; r < parts.size(); ++r) {
      Seq& s = seqs[size_t(parts[r].first)];
      s.n_computed += parts[r].second;
      row += verify ? size_t(parts[r].second) : 1;
      if (s.n_computed == int(s.tokens.size())) s.tokens.push_back(outs[0].tokens[row - 1].id);
    }
    ++stats.steps;
  };

  for (int i = 0; i < kMaxBatch / 2 && !::testing::Test::HasFailure(); ++i)
    step({{i, int(seqs[size_t(i)].tokens.size())}});
  std::vector<int> sizes(kMaxBatch);
  std::iota(sizes.begin(), sizes.end(), 1);
  std::vector<int> order;
  for (int rep = 0; rep < 3; ++rep) {
    std::shuffle(sizes.begin(), sizes.end(), rng);
    order.insert(order.end(), sizes.begin(), sizes.end());
  }
  // Sequences below `prefilling` have finished their prompts. The one prefilling is never also a decode row,
  // even with one prompt token left: a sequence twice in a step would race with itself on its slot and
  // blocks.
  int prefilling = kMaxBatch / 2;
  for (size_t k = 0; k < order.size() && !::testing::Test::HasFailure(); ++k) {
    std::vector<int> ready;
    for (int i = 0; i < prefilling; ++i)
      if (seqs[size_t(i)].n_computed == int(seqs[size_t(i)].tokens.size()) - 1) ready.push_back(i);
    std::shuffle(ready.begin(), ready.end(), rng);
    ready.resize(std::min<size_t>(ready.size(), size_t(order[k])));
    std::sort(ready.begin(), ready.end());
    std::vector<std::pair<int, int>> parts;
    for (int i : ready) parts.push_back({i, 1});
    if (k % 3 == 2 && prefilling < kMaxBatch) {
      Seq& s = seqs[size_t(prefilling)];
      const int n = std::min<int>(48, int(s.tokens.size()) - s.n_computed);
      parts.push_back({prefilling, n});
      if (s.n_computed + n == int(s.tokens.size())) ++prefilling;
    }
    if (!parts.empty()) step(parts);
  }
  // Then the prompts still unfinished (alone, in 48-token chunks) and one decode step of every size 1..16
  // over all sequences, so that every bucket runs whatever the prompt lengths drawn above.
  for (; prefilling < kMaxBatch && !::testing::Test::HasFailure(); ++prefilling) {
    const Seq& s = seqs[size_t(prefilling)];
    const int prompt = int(s.tokens.size());  // not extended yet: its prompt is unfinished
    while (s.n_computed < prompt && !::testing::Test::HasFailure())
      step({{prefilling, std::min<int>(48, prompt - s.n_computed)}});
  }
  // `n` sequences drawn at random, in order, each bringing `tokens`.
  auto random_parts = [&](int n, int tokens) {
    std::vector<int> all(kMaxBatch);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(size_t(n));
    std::sort(all.begin(), all.end());
    std::vector<std::pair<int, int>> parts;
    for (int i : all) parts.push_back({i, tokens});
    return parts;
  };
  std::shuffle(sizes.begin(), sizes.end(), rng);
  for (int n : sizes) {
    if (::testing::Test::HasFailure()) break;
    step(random_parts(n, 1));
  }
  // Verify steps: every size for k = 1 and k = 3 (then sizes 1 and 2 again, so their buckets replay too), and
  // one step of mixed draft counts.
  for (int q : {2, 1 + kMaxDrafts}) {
    std::shuffle(sizes.begin(), sizes.end(), rng);
    std::vector<int> verify_sizes = sizes;
    verify_sizes.insert(verify_sizes.end(), {1, 2});
    for (int n : verify_sizes) {
      if (::testing::Test::HasFailure()) break;
      step(random_parts(n, q), true);
    }
  }
  if (!::testing::Test::HasFailure()) {
    std::vector<std::pair<int, int>> parts;
    for (int i = 0; i < kMaxBatch; i += 2) parts.push_back({i, 1 + (i / 2) % (kMaxDrafts + 1)});
    step(parts, true);
  }
  return stats;
}

}  // namespace rill::runner::testing
