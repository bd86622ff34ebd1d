// Decode graphs on the CUDA backend (issues #16, #36): a runner that replays captured decode and verify steps
// gives the bits of one that runs the same padded steps eagerly, and that one stays within the model-level
// bounds of a runner without graphs — at every batch-size bucket, with padding rows, as sequences join and
// leave between replays and while other sequences prefill in chunks (decode_schedule.h); and an engine with
// graphs streams the tokens of one whose padded steps run eagerly, with prefix caching and constrained
// decoding. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

#include "engine/engine.h"
#include "model/logit_compare.h"
#include "runner/decode_schedule.h"
#include "test_backend_options.h"
#include "test_seed.h"
#include "text/constraint/token_constraint.h"

namespace rill::runner {
namespace {

// A replay runs the kernels of the padded step it was captured from, on inputs uploaded to the same
// addresses, and every kernel is deterministic: it must give the bits of the same padded step run eagerly. A
// stale input (a layout not re-uploaded, a plan sized for another step) moves the logits by order 1.
constexpr double kReplayRelL2 = 1e-6;

TEST(DecodeGraphs, ReplayEqualsEagerAtEveryBucketAsSequencesJoinLeaveAndPrefill) {
  auto be_g = rill::testing::make_test_backend("cuda");
  if (!be_g.ok()) GTEST_SKIP() << be_g.status().to_string();
  auto be_p = std::move(rill::testing::make_test_backend("cuda")).value();
  auto be_e = std::move(rill::testing::make_test_backend("cuda")).value();
  auto be_q = std::move(rill::testing::make_test_backend("cuda")).value();
  auto graphed = testing::make_schedule_runner(**be_g, false, true);
  auto padded = testing::make_schedule_runner(*be_p, false, false);
  auto eager = testing::make_schedule_runner(*be_e, true, true);
  auto padded2 = testing::make_schedule_runner(*be_q, false, false);
  ASSERT_TRUE(graphed && padded && eager && padded2);
  ASSERT_TRUE(graphed->graphs_enabled() && padded->graphs_enabled());
  ASSERT_FALSE(eager->graphs_enabled());
  const uint64_t seed = rill::testing::test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));

  // Padding changes the GEMM shapes (a bucket of 8 runs 8 rows where the eager step runs 6), so padded and
  // unpadded steps differ by bf16 roundings, and a rounding that flips an expert choice of the tiny model's
  // flat router moves that position by order 1 (measured on the H200, 9 seeds: median 0.7-0.9%, worst
  // 56-120%, top-1 95.8-97.7%). So the median bound of GPU against CPU applies, a looser top-1 bound, and no
  // worst-position bound (GPU-vs-CPU tests hold that only because they replay the routing): a padding row
  // that wrote a real sequence's slot or block would move the median to order 1.
  rill::testing::Compare vs_eager;
  double worst_replay = 0;
  int replayed_steps = 0;
  uint64_t replays = 0;
  const auto stats = testing::run_schedule(
      {eager.get(), padded.get(), graphed.get(), padded2.get()}, seed,
      [&](int step, bool, const std::vector<StepOutput>& o) {
        const StepOutput &e = o[0], &p = o[1], &g = o[2];
        const size_t V = size_t(e.vocab), rows = e.tokens.size();
        const bool replayed = graphed->graph_replays() > replays;
        for (size_t r = 0; r < rows; ++r) {
          const double dp = testing::rel_l2(std::span<const float>(o[3].logits).subspan(r * V, V),
                                            std::span<const float>(p.logits).subspan(r * V, V));
          EXPECT_EQ(dp, 0.0) << "padded twice, step " << step << " row " << r << " of " << rows;
          const auto gr = std::span<const float>(g.logits).subspan(r * V, V);
          const auto pr = std::span<const float>(p.logits).subspan(r * V, V);
          const double d = testing::rel_l2(gr, pr);
          worst_replay = std::max(worst_replay, d);
          EXPECT_LE(d, kReplayRelL2) << "step " << step << " row " << r << " of " << rows
                                     << (replayed ? " (replayed)" : " (eager)");
          EXPECT_EQ(g.tokens[r].id, p.tokens[r].id) << "step " << step << " row " << r;
        }
        rill::testing::compare_rows(p.logits, e.logits, int64_t(V), &vs_eager);
        if (replayed) ++replayed_steps;
        replays = graphed->graph_replays();
      });
  std::printf(
      "[ graphs ] %d steps, %d replayed, %d graphs captured, worst rel-L2 replay vs padded eager %.2e; "
      "padded vs unpadded: median %.2e, worst %.2e, top-1 %d/%d\n",
      stats.steps, replayed_steps, graphed->graphs_captured(), worst_replay, vs_eager.median(),
      vs_eager.worst_rel_l2, vs_eager.agree, vs_eager.total);
  rill::testing::expect_within_bounds(
      vs_eager, "padded decode steps vs unpadded eager ones",
      {rill::testing::kKimiLinearBounds.median, std::numeric_limits<double>::infinity(), 0.9});
  // A graph for every bucket whose padded step stays within the runner's token limit (larger ones run eagerly:
  // the backend's eager experts are faster there).
  const int64_t limit = graphed->graph_max_tokens();
  int expected = 0;
  for (int b : stats.decode_buckets) expected += b <= limit;
  for (auto [b, q] : stats.verify_buckets) expected += int64_t(b) * q <= limit;
  EXPECT_EQ(graphed->graphs_captured(), expected) << "token limit " << limit;
  EXPECT_EQ(stats.verify_buckets.size(), 2 * decode_graph_buckets(testing::kMaxBatch).size());
  // Each bucket's first decode step runs eagerly (and captures); every later one replays.
  EXPECT_GE(replayed_steps, 24);
}

// A constraint that allows, at generated position k, two tokens that move with k.
struct TwoTokens : text::constraint::TokenConstraint {
  size_t k = 0;
  void allowed_tokens(std::span<uint32_t> mask) override {
    std::fill(mask.begin(), mask.end(), 0u);
    for (int32_t t : {int32_t(3 * k + 1), int32_t(500 - k)}) mask[size_t(t) / 32] |= 1u << (t % 32);
  }
  void accept(int32_t) override { ++k; }
};

std::vector<int32_t> run_all(bool capture, const std::vector<std::vector<int32_t>>& prompts, bool* ran) {
  auto be = rill::testing::make_test_backend("cuda");
  if (!be.ok()) return {};
  *ran = true;
  auto m = model::load_model(rill::testing::data_dir() / "kimi_linear_tiny_b", **be);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  engine::EngineOptions o;
  o.max_batch_size = 8;
  o.max_num_tokens = 96;  // long prompts prefill in chunks between graphed decode steps
  o.enable_prefix_caching = true;
  o.kda_snapshot_interval = 64;
  o.capture_graphs = capture;
  o.wait_for_masks = true;  // the same steps in both engines, whatever the mask threads' timing
  auto created = engine::Engine::create(std::move(m).value(), nullptr, o);
  EXPECT_TRUE(created.ok()) << created.status().to_string();
  if (!created.ok()) return {};
  auto e = std::move(created).value();
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine::SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 12 + int(i % 5);
    p.ignore_eos = true;
    std::shared_ptr<text::constraint::TokenConstraint> c;
    if (i % 4 == 3) c = std::make_shared<TwoTokens>();
    if (i % 4 == 1) p.allowed_token_ids = {5, 6, 7, 8, int32_t(100 + i)};
    auto st = e->submit({prompts[i], p, -1, c});
    EXPECT_TRUE(st.ok()) << "prompt " << i << ": " << st.status().to_string();
    if (!st.ok()) return {};
    streams.push_back(*st);
  }
  std::vector<int32_t> out;
  for (auto& s : streams) {
    engine::StreamEvent ev;
    while (s->next(&ev, std::chrono::seconds(120))) {
      out.insert(out.end(), ev.token_ids.begin(), ev.token_ids.end());
      if (ev.finish) break;
    }
    out.push_back(-1);
  }
  e->shutdown(false);
  return out;
}

// Against an engine whose decode steps run padded but eagerly (capture_graphs off), not one with
// --enforce-eager: padding changes GEMM shapes, and greedy streams of the tiny model's flat logits diverge on
// a bf16 rounding (the test above bounds padded against unpadded steps).
TEST(DecodeGraphs, EngineWithGraphsStreamsWhatPaddedEagerStepsStream) {
  const uint64_t seed = rill::testing::test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng{uint32_t(seed) ^ 0x5eedu};
  // Prompts sharing prefixes (warm prefix-cache hits for the later ones), of mixed lengths, in tiny_b's
  // vocabulary of 512.
  std::vector<int32_t> base(300);
  for (int32_t& t : base) t = int32_t(rng() % 500);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> p(base.begin(), base.begin() + (i % 3 == 0 ? 200 : 5 + int(rng() % 150)));
    for (int k = 0; k < int(rng() % 40); ++k) p.push_back(int32_t(rng() % 500));
    prompts.push_back(std::move(p));
  }
  bool ran = false;
  const auto padded = run_all(false, prompts, &ran);
  if (!ran) GTEST_SKIP() << "no CUDA GPU";
  const auto graphed = run_all(true, prompts, &ran);
  // Where they part: the request (streams are separated by -1) and the token within it, so a failure names it.
  size_t at = 0;
  while (at < graphed.size() && at < padded.size() && graphed[at] == padded[at]) ++at;
  const auto request = std::count(padded.begin(), padded.begin() + std::ptrdiff_t(std::min(at, padded.size())), -1);
  EXPECT_EQ(graphed, padded) << "first difference at output " << at << " (request " << request << ", prompt of "
                             << (size_t(request) < prompts.size() ? prompts[size_t(request)].size() : 0)
                             << " tokens)";
}

}  // namespace
}  // namespace rill::runner
