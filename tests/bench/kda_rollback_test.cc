// The host half of the KDA rollback lab (bench/kernels/kda_rollback.h, issue #21), checked on the CPU so that
// the GPU run of kda_rollback_bench only adds the kernels: the double reference against the spec's other form
// of the gated delta rule, records folded on the host against the recurrence and against the closed form of a
// prefix (spec/speculative.md §1), which state each strategy's bookkeeping commits for every acceptance, and
// the bytes and memory the lab reports.
#include "bench/kernels/kda_rollback.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "test_seed.h"

namespace rill::bench::kda_rollback {
namespace {

double max_diff(const State& a, const State& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

double max_abs(const State& a) {
  double m = 0;
  for (double x : a) m = std::max(m, std::abs(x));
  return m;
}

// The spec's equivalent form, S_t = (I - beta k̂ k̂^T) diag(alpha) S_{t-1} + beta k̂ v^T and o_t = S_t^T q̂,
// written out independently of step(): the reference decays rows (d_k channels) and reads the updated state.
TEST(KdaRollback, ReferenceStepIsTheSpecsSecondForm) {
  const uint32_t seed = testing::test_seed();
  SCOPED_TRACE(seed);
  const int d = 16, n = 6;
  const Inputs in = make_inputs(1, n, 2, d, seed);
  for (int h = 0; h < 2; ++h) {
    const HeadRun run = run_head(in, 0, h, n);
    State S = initial_state(in, 0, h);
    for (int t = 0; t < n; ++t) {
      const size_t x = in.row(0, t, h);
      const double beta = in.beta[size_t(t) * 2 + h];
      double qq = 0, kk = 0;
      for (int c = 0; c < d; ++c)
        qq += double(in.q[x + c]) * in.q[x + c], kk += double(in.k[x + c]) * in.k[x + c];
      std::vector<double> kh(d), qh(d);
      for (int c = 0; c < d; ++c) {
        kh[c] = in.k[x + c] / std::sqrt(kk + 1e-6);
        qh[c] = in.q[x + c] / std::sqrt(qq + 1e-6) / std::sqrt(double(d));
      }
      State D(S.size()), next(S.size());  // D = diag(alpha) S
      for (int c = 0; c < d; ++c)
        for (int j = 0; j < d; ++j) D[c * d + j] = std::exp(double(in.g[x + c])) * S[c * d + j];
      for (int r = 0; r < d; ++r)
        for (int j = 0; j < d; ++j) {
          double acc = 0;  // ((I - beta k̂ k̂^T) D)[r][j]
          for (int c = 0; c < d; ++c) acc += ((r == c ? 1.0 : 0.0) - beta * kh[r] * kh[c]) * D[c * d + j];
          next[r * d + j] = acc + beta * kh[r] * in.v[x + j];
        }
      S = next;
      ASSERT_LT(max_diff(S, run.states[t]), 1e-12 * std::max(1.0, max_abs(S)))
          << "head " << h << " token " << t;
      for (int j = 0; j < d; ++j) {
        double o = 0;
        for (int c = 0; c < d; ++c) o += qh[c] * S[c * d + j];
        ASSERT_NEAR(run.outputs[t][j], o, 1e-12) << "head " << h << " token " << t << " column " << j;
      }
    }
  }
}

// Records folded on the host give back the state after every prefix, one at a time (what the fold kernel
// does) and in one go from the closed form S_m = diag(exp G_m) S_0 + sum_{i<m} diag(exp(G_m - G_i)) (beta
// k̂_i) e_i^T, G the cumulative log-decay: no intermediate state is needed to commit any prefix.
TEST(KdaRollback, FoldOfRecordsEqualsTheRecurrence) {
  const uint32_t seed = testing::test_seed();
  SCOPED_TRACE(seed);
  const int d = 32, n = 9;
  const Inputs in = make_inputs(2, n, 3, d, seed + 1);
  for (int s = 0; s < 2; ++s)
    for (int h = 0; h < 3; ++h) {
      const HeadRun run = run_head(in, s, h, n);
      State S = initial_state(in, s, h);
      for (int m = 1; m <= n; ++m) {
        fold(S, d, run.records[m - 1]);
        const double scale = std::max(1.0, max_abs(run.states[m - 1]));
        ASSERT_LT(max_diff(S, run.states[m - 1]), 1e-12 * scale)
            << "seq " << s << " head " << h << " m " << m;

        State closed = initial_state(in, s, h);
        std::vector<double> G(d, 0.0);  // G_m per channel
        for (int t = 0; t < m; ++t)
          for (int c = 0; c < d; ++c) G[c] += in.g[in.row(s, t, h) + c];
        for (int c = 0; c < d; ++c)
          for (int j = 0; j < d; ++j) closed[c * d + j] *= std::exp(G[c]);
        std::vector<double> Gi(d, 0.0);  // G_i, the decay up to and including token i
        for (int i = 0; i < m; ++i) {
          for (int c = 0; c < d; ++c) Gi[c] += in.g[in.row(s, i, h) + c];
          const Record& r = run.records[i];
          for (int c = 0; c < d; ++c)
            for (int j = 0; j < d; ++j) closed[c * d + j] += std::exp(G[c] - Gi[c]) * r.bk[c] * r.e[j];
        }
        ASSERT_LT(max_diff(closed, run.states[m - 1]), 1e-10 * scale)
            << "closed form, seq " << s << " m " << m;
      }
    }
}

TEST(KdaRollback, BookkeepingNamesTheStateOfEachAcceptance) {
  for (int k : {1, 2, 4, 8}) {
    EXPECT_EQ(verify_tokens(k), k + 1);
    EXPECT_FALSE(checkpoint_action(k, k).restore);
    EXPECT_EQ(checkpoint_action(k, k).refeed_tokens, 0);
    EXPECT_TRUE(per_token_source(k, k).in_slot);
    EXPECT_EQ(fold_tokens(k), k + 1);
    for (int a = 0; a < k; ++a) {
      EXPECT_TRUE(checkpoint_action(a, k).restore);
      EXPECT_EQ(checkpoint_action(a, k).refeed_tokens, a + 1);
      EXPECT_FALSE(per_token_source(a, k).in_slot);
      EXPECT_EQ(per_token_source(a, k).buffer, a);
      EXPECT_EQ(fold_tokens(a), a + 1);
    }
  }
}

// Each strategy played on the host with only its bookkeeping (what the lab's kernels and copies do on the
// GPU): for every k and every acceptance the committed slot is the reference state after a + 1 tokens.
TEST(KdaRollback, EveryStrategyCommitsTheStateAfterTokenA) {
  const uint32_t seed = testing::test_seed();
  SCOPED_TRACE(seed);
  const int d = 16;
  for (int k : {1, 2, 4, 8}) {
    const Inputs in = make_inputs(1, verify_tokens(k), 2, d, seed + uint32_t(k));
    for (int h = 0; h < 2; ++h) {
      const HeadRun ref = run_head(in, 0, h, verify_tokens(k));
      auto feed = [&](State& S, int n, std::vector<State>* after_each, std::vector<Record>* records) {
        for (int t = 0; t < n; ++t) {
          const size_t x = in.row(0, t, h);
          std::vector<double> o(d);
          const Record r =
              step(S, d, &in.q[x], &in.k[x], &in.v[x], &in.g[x], in.beta[size_t(t) * 2 + h], o.data());
          if (after_each) after_each->push_back(S);
          if (records) records->push_back(r);
        }
      };
      for (int a = 0; a <= k; ++a) {
        SCOPED_TRACE(::testing::Message() << "k " << k << " a " << a << " head " << h);
        const State& want = ref.states[a];
        const double tol = 1e-12 * std::max(1.0, max_abs(want));
        {  // (0) checkpoint + re-feed
          State slot = initial_state(in, 0, h);
          const State checkpoint = slot;
          feed(slot, verify_tokens(k), nullptr, nullptr);
          const CheckpointAction act = checkpoint_action(a, k);
          if (act.restore) {
            slot = checkpoint;
            feed(slot, act.refeed_tokens, nullptr, nullptr);
          }
          EXPECT_LT(max_diff(slot, want), tol) << "checkpoint";
        }
        {  // (1) per-token states: buffers for tokens 0..k-1, the last in place
          State slot = initial_state(in, 0, h);
          std::vector<State> after;
          feed(slot, verify_tokens(k), &after, nullptr);
          const std::vector<State> buffers(after.begin(), after.end() - 1);
          ASSERT_EQ(int(buffers.size()), k);
          const PerTokenSource src = per_token_source(a, k);
          if (!src.in_slot) slot = buffers[size_t(src.buffer)];
          EXPECT_LT(max_diff(slot, want), tol) << "per-token";
        }
        {  // (2) records: the verify works on a copy in registers, the slot is only folded
          State slot = initial_state(in, 0, h), held = slot;
          std::vector<Record> records;
          feed(held, verify_tokens(k), nullptr, &records);
          ASSERT_EQ(max_diff(slot, initial_state(in, 0, h)), 0.0);
          for (int t = 0; t < fold_tokens(a); ++t) fold(slot, d, records[size_t(t)]);
          EXPECT_LT(max_diff(slot, want), tol) << "records";
        }
      }
    }
  }
}

TEST(KdaRollback, InputsAreInTheModelsRanges) {
  const Inputs in = make_inputs(2, 5, 4, 128, testing::test_seed());
  for (float g : in.g) {
    ASSERT_LT(g, 0.0f);
    ASSERT_TRUE(std::isfinite(g));
  }
  for (float b : in.beta) {
    ASSERT_GT(b, 0.0f);
    ASSERT_LT(b, 1.0f);
  }
  for (float q : in.q) ASSERT_EQ(q, round_to_bf16(q));  // the kernels read q, k, v as bf16
  double mean_g = 0;
  for (float g : in.g) mean_g += g / double(in.g.size());
  EXPECT_GT(mean_g, -1.0);  // mostly gentle decays: alpha near 1 for most channels
}

// The report's accounting at the Kimi-Linear-48B shape (32 heads x 128, 20 KDA layers).
TEST(KdaRollback, MemoryAndBytesAtThe48BShape) {
  const Shape s;
  const double MiB = 1024.0 * 1024.0, S = state_bytes(s), R = record_bytes(s);
  EXPECT_EQ(S, 2 * MiB);
  EXPECT_EQ(R, 48 * 1024.0);
  for (int k : {1, 2, 4, 8}) {
    EXPECT_EQ(added_memory(Strategy::Checkpoint, s, k), 40 * MiB);
    EXPECT_EQ(added_memory(Strategy::CheckpointFused, s, k), 40 * MiB);
    EXPECT_EQ(added_memory(Strategy::PerToken, s, k), k * 40 * MiB);
    EXPECT_EQ(added_memory(Strategy::Records, s, k), (k + 1) * 960 * 1024.0);
    const double io = (k + 1) * token_io_bytes(s);
    for (int a = 0; a <= k; ++a) {
      const bool all = a == k;
      EXPECT_EQ(traffic(Strategy::Checkpoint, s, k, a).total(), (all ? 4 : 6) * S + io);
      EXPECT_EQ(traffic(Strategy::CheckpointFused, s, k, a).total(), (all ? 3 : 5) * S + io);
      EXPECT_EQ(traffic(Strategy::PerToken, s, k, a).total(), (all ? k + 2 : k + 4) * S + io);
      EXPECT_EQ(traffic(Strategy::Records, s, k, a).total(), 3 * S + (k + 1 + a + 1) * R + io);
      EXPECT_EQ(refeed_bytes(s, a, k), all ? 0.0 : (a + 1) * token_io_bytes(s));
      // Records read the state twice and write it once: always fewer bytes than today's checkpoint, and than
      // per-token states from k = 2 (at k = 1 and all accepted those write 2 states, records a few KiB more).
      EXPECT_LT(traffic(Strategy::Records, s, k, a).total(), traffic(Strategy::Checkpoint, s, k, a).total());
      if (k >= 2) {
        EXPECT_LT(traffic(Strategy::Records, s, k, a).total(), traffic(Strategy::PerToken, s, k, a).total());
      }
    }
  }
}

}  // namespace
}  // namespace rill::bench::kda_rollback
