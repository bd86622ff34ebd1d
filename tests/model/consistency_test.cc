// The same tokens fed one-shot, in chunks and token by token give the same logits; a ragged batch mixing
// prefill chunks and decode steps gives each sequence exactly what it gets alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "model/fixture.h"
#include "model/sequence_session.h"

namespace rill {
namespace {

using testing::max_abs_diff;

std::unique_ptr<model::Model> load(backend::Backend& be, const std::string& name) {
  auto m = model::load_model(testing::data_dir() / name, be);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  model::StepLimits lim;
  lim.max_tokens = 256;
  lim.max_seqs = 8;
  lim.max_logit_rows = 256;
  lim.max_context = 512;
  EXPECT_TRUE((*m)->reserve_workspace(lim).ok());
  return std::move(m).value();
}

class Consistency : public ::testing::TestWithParam<std::string> {};

TEST_P(Consistency, ChunkedOneShotAndTokenByTokenAgree) {
  auto be = backend::make_cpu_backend();
  auto model = load(*be, GetParam());
  testing::Reference ref(testing::data_dir() / GetParam());
  const auto ids = ref.ints("prompt_4");  // 160 tokens: two full KDA chunks and a partial one
  ASSERT_GE(ids.size(), 150u);
  auto run = [&](int chunk) {
    auto s = model::SequenceSession::create(*model, 512);
    EXPECT_TRUE(s.ok());
    auto logits = s->feed(ids, chunk, true);
    EXPECT_TRUE(logits.ok()) << logits.status().to_string();
    return *logits;
  };
  const std::vector<float> one_shot = run(0);
  for (int chunk : {1, 3, 16, 64, 100}) {
    EXPECT_LE(max_abs_diff(run(chunk), one_shot), 1e-4f) << "chunk " << chunk;
  }
}

// A scheduled step: which sequence gets how many new tokens.
struct Piece {
  int seq, n;
};

TEST_P(Consistency, RaggedBatchEqualsSequencesAlone) {
  auto be = backend::make_cpu_backend();
  auto model = load(*be, GetParam());
  const int64_t V = model->config().vocab_size;
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::vector<int> lengths = {150, 7, 70, 33};
  std::vector<std::vector<int32_t>> tokens;
  for (int n : lengths) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(rng() % uint32_t(V));
    tokens.push_back(t);
  }
  // A schedule mixing long prefill chunks, short chunks and single decode-like tokens in the same steps.
  const std::vector<std::vector<Piece>> steps = {
      {{0, 40}, {1, 3}},
      {{0, 64}, {1, 1}, {2, 50}},
      {{1, 1}, {2, 20}, {3, 33}, {0, 10}},
      {{0, 36}, {1, 1}, {3, 0}},
      {{1, 1}},
  };
  const int block = 64, blocks_per_seq = 4;
  auto caches = model::ModelCaches::allocate(*be, model->config(), 4, 4 * blocks_per_seq, block);
  ASSERT_TRUE(caches.ok());
  std::vector<int> pos(4, 0);
  std::vector<std::vector<float>> batched(4);
  std::vector<std::vector<int>> chunks(4);  // each sequence's chunk sizes, to replay alone
  for (const auto& step : steps) {
    model::StepBatch b;
    for (const Piece& p : step) {
      if (p.n == 0) continue;
      model::SequenceStep s;
      s.start_pos = pos[size_t(p.seq)];
      s.n_new = p.n;
      s.state_slot = p.seq;
      for (int k = 0; k < blocks_per_seq; ++k) s.block_table.push_back(p.seq * blocks_per_seq + k);
      s.logits = model::LogitsNeeded::All;
      b.token_ids.insert(b.token_ids.end(), tokens[size_t(p.seq)].begin() + s.start_pos,
                         tokens[size_t(p.seq)].begin() + s.start_pos + p.n);
      b.seqs.push_back(s);
      chunks[size_t(p.seq)].push_back(p.n);
      pos[size_t(p.seq)] += p.n;
    }
    auto logits = model->forward(b, *caches);
    ASSERT_TRUE(logits.ok()) << logits.status().to_string();
    std::vector<float> host(static_cast<size_t>(logits->numel()));
    ASSERT_TRUE(be->copy_to_host(host.data(), logits->data, host.size() * 4).ok());
    size_t row = 0;
    for (const auto& s : b.seqs) {
      auto& dst = batched[size_t(s.state_slot)];
      dst.insert(dst.end(), host.begin() + int64_t(row * V), host.begin() + int64_t((row + size_t(s.n_new)) * V));
      row += size_t(s.n_new);
    }
  }
  for (int s = 0; s < 4; ++s) {
    ASSERT_EQ(pos[size_t(s)], lengths[size_t(s)]);
    auto alone = model::SequenceSession::create(*model, 512);
    ASSERT_TRUE(alone.ok());
    std::vector<float> got;
    size_t off = 0;
    for (int n : chunks[size_t(s)]) {
      auto l = alone->feed(std::span<const int32_t>(tokens[size_t(s)].data() + off, size_t(n)), n, true);
      ASSERT_TRUE(l.ok());
      got.insert(got.end(), l->begin(), l->end());
      off += size_t(n);
    }
    EXPECT_EQ(max_abs_diff(got, batched[size_t(s)]), 0.0f) << "sequence " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Consistency, ::testing::ValuesIn(testing::kimi_linear_fixtures()));

}  // namespace
}  // namespace rill
