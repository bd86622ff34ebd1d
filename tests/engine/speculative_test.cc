// Speculative decoding (issue #21) on the CPU backend, for a Kimi Linear and a Kimi K3 checkpoint: greedy
// output with speculation equals the output without it, token for token, and the logits of every emitted
// position are the same bits — with drafts that are always right (an oracle that
// proposes the run's own greedy continuation), always wrong, or right up to a random point with random
// lengths and zero-draft steps; drafts crossing stop ids, stop strings and max_tokens; prefix caching with
// warm prefixes; chunked prefill; preemption; batches mixing speculating and non-speculating requests
// (sampled, penalised, logprobs, grammar-constrained); the n-gram, suffix and draft-model drafters.
// The acceptance statistics of the oracle (all accepted) and of the wrong drafter (none) are checked exactly.
// The config parser and the acceptance rule alone: speculative_config_test.cc.
//
// Bit for bit: on the CPU backend the KDA recurrence runs token by token for every step and every other op of
// the forward is row-independent, so a verify step's logits are exactly those of the one-token steps it
// stands for, however prompts were chunked, re-fed or recomputed (src/engine/README.md, Gotchas).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include "engine/engine.h"
#include "engine/logged_engine.h"
#include "engine/engine_fixtures.h"
#include "engine/spec/acceptance.h"
#include "runner/draft_proposer.h"
#include "model/model.h"
#include "shared_data.h"
#include "test_seed.h"
#include "text/constraint/grammar_constraint.h"
#include "text/constraint/json_schema.h"
#include "text/constraint/token_constraint.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::engine {
namespace {

using rill::testing::random_tokens;

using rill::testing::test_seed;

struct Outcome {
  std::vector<int32_t> ids;
  std::string text;
  std::vector<std::vector<float>> logits;  // one row per emitted token
  std::vector<TokenLogprob> logprobs;
  FinishReason reason = FinishReason::Error;
  std::string stop_reason;
  int cached = -1;
};

struct LogitsLog {
  std::mutex mu;
  std::map<uint64_t, std::vector<std::vector<float>>> rows;
};

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// Seeded sampling, with one of a few truncations (top_p, top_k, min_p) chosen by `variant`.
SamplingParams seeded(int max_tokens, uint64_t seed, int variant) {
  SamplingParams p = greedy(max_tokens);
  p.temperature = 0.7f + 0.1f * float(variant % 3);
  p.seed = seed;
  switch (variant % 4) {
    case 0:
      break;
    case 1:
      p.top_p = 0.9f;
      break;
    case 2:
      p.top_k = 8;
      break;
    case 3:
      p.min_p = 0.05f;
      break;
  }
  return p;
}

class Harness {
 public:
  Harness(const std::string& fixture, EngineOptions o, std::shared_ptr<const text::Tokenizer> tok = nullptr)
      : log_(std::make_shared<LogitsLog>()) {
    be_ = backend::make_cpu_backend();
    auto m = model::load_model(testing::engine_model_dir(fixture), *be_);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    std::shared_ptr<LogitsLog> log = log_;
    o.logits_hook = [log](uint64_t id, int32_t, std::span<const float> row) {
      std::lock_guard lock(log->mu);
      log->rows[id].emplace_back(row.begin(), row.end());
    };
    auto e = Engine::create(std::move(m).value(), std::move(tok), o);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    engine_ = std::move(e).value();
  }
  ~Harness() {
    if (engine_) engine_->shutdown(false);
  }

  std::shared_ptr<RequestStream> submit(Request r) {
    auto s = engine_->submit(std::move(r));
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return *s;
  }
  Outcome collect(const std::shared_ptr<RequestStream>& s) {
    Outcome r;
    StreamEvent ev;
    while (s->next(&ev, std::chrono::seconds(120))) {
      r.ids.insert(r.ids.end(), ev.token_ids.begin(), ev.token_ids.end());
      r.text += ev.text;
      r.logprobs.insert(r.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
      if (ev.finish) {
        r.reason = *ev.finish;
        r.stop_reason = ev.stop_reason;
        r.cached = ev.cached_tokens;
        std::lock_guard lock(log_->mu);
        r.logits = std::move(log_->rows[s->id()]);
        return r;
      }
    }
    ADD_FAILURE() << "request timed out";
    return r;
  }
  Outcome run(const std::vector<int32_t>& prompt, const SamplingParams& p) {
    return collect(submit({prompt, p}));
  }
  // Runs the requests at once; outcomes in order.
  std::vector<Outcome> run_all(std::vector<Request> requests) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (Request& r : requests) streams.push_back(submit(std::move(r)));
    std::vector<Outcome> out;
    for (auto& s : streams) out.push_back(collect(s));
    return out;
  }
  Engine& engine() { return *engine_; }

 private:
  std::unique_ptr<backend::Backend> be_;  // outlives the engine (declared first)
  std::shared_ptr<LogitsLog> log_;
  std::unique_ptr<Engine> engine_;
};

std::string current_fixture = "kimi_linear_tiny_b";
class Speculative : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { current_fixture = GetParam(); }
};

// Without speculation, one request at a time, whole prompts in one step: the plainest computation.
Outcome reference(const Request& r, std::shared_ptr<const text::Tokenizer> tok = nullptr) {
  static std::map<std::string, std::unique_ptr<Harness>> off;
  const std::string key = current_fixture + (tok ? "+tokenizer" : "");
  auto& h = off[key];
  if (!h)
    h = std::make_unique<Harness>(current_fixture, EngineOptions{.max_batch_size = 1, .max_num_tokens = 1024},
                                  tok);
  return h->collect(h->submit(r));
}
Outcome reference(const std::vector<int32_t>& prompt, const SamplingParams& p) {
  return reference(Request{prompt, p});
}

void expect_same(const Outcome& on, const Outcome& off, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(on.reason, off.reason);
  EXPECT_EQ(on.stop_reason, off.stop_reason);
  EXPECT_EQ(on.ids, off.ids);
  EXPECT_EQ(on.text, off.text);
  // Logprobs are a log-softmax of the row: they move by at most twice the logits' rounding.
  ASSERT_EQ(on.logprobs.size(), off.logprobs.size());
  for (size_t r = 0; r < on.logprobs.size(); ++r) {
    const TokenLogprob &a = on.logprobs[r], &b = off.logprobs[r];
    EXPECT_EQ(a.id, b.id) << "logprobs of token " << r;
    EXPECT_EQ(a.logprob, b.logprob) << "logprob of token " << r;
    ASSERT_EQ(a.top.size(), b.top.size()) << "token " << r;
    for (size_t k = 0; k < a.top.size(); ++k) {
      EXPECT_EQ(a.top[k].first, b.top[k].first) << "token " << r << ", top " << k;
      EXPECT_EQ(a.top[k].second, b.top[k].second) << "token " << r << ", top " << k;
    }
  }
  ASSERT_EQ(on.logits.size(), off.logits.size());
  for (size_t r = 0; r < on.logits.size(); ++r) {
    ASSERT_EQ(on.logits[r].size(), off.logits[r].size());
    // Bit for bit (the header says why); -inf where a token mask set it, on both sides.
    size_t differ = 0;
    double diff = 0;
    for (size_t i = 0; i < on.logits[r].size(); ++i) {
      if (on.logits[r][i] == off.logits[r][i]) continue;
      ++differ;
      diff = std::max(diff, std::abs(double(on.logits[r][i]) - off.logits[r][i]));
    }
    EXPECT_EQ(differ, 0u) << "emitted token " << r << ": logits differ by up to " << diff;
  }
}

// Knows the reference run of every prompt it was told (prompt + greedy output). A context that continues one
// of them gets its next tokens, corrupted as the mode says; any other context gets nothing.
class ReferenceDrafter final : public spec::Drafter {
 public:
  enum class Mode { Oracle, Wrong, Random, FirstRight, RightFirstN };
  // RightFirstN: the first `n_right` drafts of each proposal are right, the rest wrong.
  ReferenceDrafter(Mode mode, uint32_t seed = 0, int n_right = 0) : mode_(mode), seed_(seed), n_right_(n_right) {}
  void learn(std::vector<int32_t> prompt, const std::vector<int32_t>& output) {
    prompt.insert(prompt.end(), output.begin(), output.end());
    known_.push_back(std::move(prompt));
  }
  std::vector<int32_t> propose(std::span<const int32_t> context, int max_tokens) const override {
    for (const auto& full : known_) {
      if (context.size() >= full.size() || !std::equal(context.begin(), context.end(), full.begin()))
        continue;
      const size_t at = context.size();
      std::vector<int32_t> d(full.begin() + long(at),
                             full.begin() + long(std::min(full.size(), at + size_t(max_tokens))));
      switch (mode_) {
        case Mode::Oracle:
          break;
        case Mode::Wrong:
          for (int32_t& t : d) t = 3 + (t + 1 - 3) % 500;  // never the token the model chooses
          break;
        case Mode::FirstRight:  // exactly one draft accepted per verify step
          for (size_t i = 1; i < d.size(); ++i) d[i] = 3 + (d[i] + 1 - 3) % 500;
          break;
        case Mode::RightFirstN:
          for (size_t i = size_t(n_right_); i < d.size(); ++i) d[i] = 3 + (d[i] + 1 - 3) % 500;
          break;
        case Mode::Random: {
          // Per context: no drafts, fewer, or right up to a point and wrong from there.
          std::mt19937 rng(seed_ * 2654435761u + uint32_t(at));
          const uint32_t r = rng() % 8;
          if (r == 0) return {};
          d.resize(std::min(d.size(), size_t(1 + rng() % uint32_t(max_tokens))));
          if (r >= 4 && !d.empty()) {
            const size_t wrong = rng() % d.size();
            d[wrong] = 3 + (d[wrong] + 1 - 3) % 500;
          }
          break;
        }
      }
      return d;
    }
    return {};
  }
  // The scheduler asks for a step's drafts in one batch; the largest batch it asked is kept.
  std::vector<std::vector<int32_t>> propose_batch(std::span<const spec::DraftQuery> queries) const override {
    largest_batch = std::max(largest_batch, queries.size());
    return Drafter::propose_batch(queries);
  }
  mutable size_t largest_batch = 0;  // the engine thread's only

 private:
  Mode mode_;
  uint32_t seed_;
  int n_right_ = 0;
  std::vector<std::vector<int32_t>> known_;
};

// Speculation that never stops for low acceptance (the tests of rollbacks want every step to draft); the
// break-even rule has its own test.
EngineOptions speculating(int k, std::shared_ptr<spec::Drafter> drafter, int max_num_tokens = 256,
                          int max_batch_size = 4) {
  EngineOptions o{.max_batch_size = max_batch_size, .max_num_tokens = max_num_tokens};
  o.speculative.num_speculative_tokens = k;
  o.drafter = std::move(drafter);
  o.speculation_break_even.min_steps = INT_MAX;
  return o;
}

// Prompts with repetition, so that the n-gram drafter finds matches too.
std::vector<std::vector<int32_t>> prompts(std::mt19937& rng, int n) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p = random_tokens(rng, 20 + rng() % 40);
    const std::vector<int32_t> again(p.begin(), p.begin() + 12);
    p.insert(p.end(), again.begin(), again.end());
    out.push_back(std::move(p));
  }
  return out;
}

TEST_P(Speculative, OracleDraftsAreAllAcceptedAndChangeNothing) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  auto oracle = std::make_shared<ReferenceDrafter>(ReferenceDrafter::Mode::Oracle);
  const auto ps = prompts(rng, 3);
  std::vector<Outcome> want;
  for (size_t i = 0; i < ps.size(); ++i) {
    want.push_back(reference(ps[i], greedy(int(17 + 5 * i))));  // 17, 22, 27: not multiples of k + 1
    oracle->learn(ps[i], want.back().ids);
  }
  Harness on(current_fixture, speculating(4, oracle));
  std::vector<Request> rs;
  for (size_t i = 0; i < ps.size(); ++i) rs.push_back({ps[i], greedy(int(17 + 5 * i))});
  const std::vector<Outcome> got = on.run_all(rs);
  for (size_t i = 0; i < ps.size(); ++i) expect_same(got[i], want[i], "request " + std::to_string(i));
  const EngineStats s = on.engine().stats();
  EXPECT_GT(s.spec_num_drafts, 0u);
  EXPECT_EQ(s.spec_num_accepted_tokens, s.spec_num_draft_tokens);
  EXPECT_EQ(oracle->largest_batch, ps.size()) << "the three sequences' drafts were asked for together";
  // Every verify step emits all its drafts and the bonus token; most carry k = 4 (fewer only near
  // max_tokens).
  ASSERT_EQ(s.spec_acceptance_lengths.size(), 5u);
  EXPECT_EQ(s.spec_acceptance_lengths[0], 0u);
  uint64_t steps = 0, emitted = 0;
  for (size_t n = 0; n < 5; ++n)
    steps += s.spec_acceptance_lengths[n], emitted += (n + 1) * s.spec_acceptance_lengths[n];
  EXPECT_EQ(steps, s.spec_num_drafts);
  EXPECT_EQ(emitted, s.spec_num_draft_tokens + s.spec_num_drafts);
  EXPECT_GT(s.spec_acceptance_lengths[4],
            s.spec_acceptance_lengths[1] + s.spec_acceptance_lengths[2] + s.spec_acceptance_lengths[3]);
  // 66 tokens in far fewer steps than one per token: 3 prefill steps at most plus the verify steps.
  EXPECT_EQ(s.generation_tokens_total, 17u + 22u + 27u);
}

TEST_P(Speculative, WrongDraftsAreAllRejectedAndChangeNothing) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  auto wrong = std::make_shared<ReferenceDrafter>(ReferenceDrafter::Mode::Wrong);
  const auto ps = prompts(rng, 2);
  std::vector<Outcome> want;
  for (const auto& p : ps) {
    want.push_back(reference(p, greedy(30)));
    wrong->learn(p, want.back().ids);
  }
  // Checkpoint + re-feed after every step (the default, replay records, folds a = 0 drafts: covered by
  // ReplayRecordsCommitEveryAcceptedCount).
  EngineOptions o = speculating(3, wrong);
  o.speculative.kda_rollback = cache::KdaRollback::Checkpoint;
  Harness on(current_fixture, o);
  const std::vector<Outcome> got = on.run_all({{ps[0], greedy(30)}, {ps[1], greedy(30)}});
  for (size_t i = 0; i < ps.size(); ++i) expect_same(got[i], want[i], "request " + std::to_string(i));
  const EngineStats s = on.engine().stats();
  EXPECT_GT(s.spec_num_drafts, 10u);
  EXPECT_GT(s.spec_num_draft_tokens, s.spec_num_drafts);
  EXPECT_EQ(s.spec_num_accepted_tokens, 0u);
  ASSERT_EQ(s.spec_acceptance_lengths.size(), 4u);
  EXPECT_EQ(s.spec_acceptance_lengths[0], s.spec_num_drafts);  // every verify step emits one token
}

TEST_P(Speculative, DraftsRightUpToARandomPointChangeNothing) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  auto drafter = std::make_shared<ReferenceDrafter>(ReferenceDrafter::Mode::Random, seed);
  const auto ps = prompts(rng, 4);
  std::vector<Request> rs;
  std::vector<Outcome> want;
  for (const auto& p : ps) {
    rs.push_back({p, greedy(20 + int(rng() % 30))});
    want.push_back(reference(rs.back()));
    drafter->learn(p, want.back().ids);
  }
  Harness on(current_fixture, speculating(1 + int(rng() % 6), drafter, 64));
  const std::vector<Outcome> got = on.run_all(rs);
  for (size_t i = 0; i < rs.size(); ++i) expect_same(got[i], want[i], "request " + std::to_string(i));
  const EngineStats s = on.engine().stats();
  EXPECT_GT(s.spec_num_accepted_tokens, 0u);
  EXPECT_LT(s.spec_num_accepted_tokens, s.spec_num_draft_tokens);
  EXPECT_EQ(s.kv_blocks_used, 0);  // truncations and rollbacks gave every block back
  EXPECT_EQ(s.state_slots_used, 0);
}

// Rollback by replay records (--speculative-config "kda_rollback": "records"): for every accepted count a in
// 0..k, verify steps that accept exactly a drafts commit, through the fold of a + 1 records, the state of the
// plain run — the logits of every later position are its bits (expect_same), which they would not be with a
// state off by one token or one rounding — and nothing is re-fed: every verify step is one sequence's
// [last, d1..dk] (the tokens processed are the prompt's, then k + 1 per verify step). The caches' memory
// plan holds records instead of checkpoint slots.
TEST_P(Speculative, ReplayRecordsCommitEveryAcceptedCount) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  const int k = 4;
  const auto ps = prompts(rng, 2);
  std::vector<Outcome> want;
  for (const auto& p : ps) want.push_back(reference(p, greedy(23)));
  for (int a = 0; a <= k; ++a) {
    SCOPED_TRACE("accepted per verify step: " + std::to_string(a));
    auto drafter = std::make_shared<ReferenceDrafter>(ReferenceDrafter::Mode::RightFirstN, 0, a);
    for (size_t i = 0; i < ps.size(); ++i) drafter->learn(ps[i], want[i].ids);
    EngineOptions o = speculating(k, drafter);
    o.speculative.kda_rollback = cache::KdaRollback::Records;
    Harness on(current_fixture, o);
    const std::vector<Outcome> got = on.run_all({{ps[0], greedy(23)}, {ps[1], greedy(23)}});
    for (size_t i = 0; i < ps.size(); ++i) expect_same(got[i], want[i], "request " + std::to_string(i));
    const EngineStats s = on.engine().stats();
    EXPECT_GT(s.spec_num_drafts, 4u);
    // Each verify step accepted a drafts, except near max_tokens where fewer were proposed.
    EXPECT_LE(s.spec_num_accepted_tokens, uint64_t(a) * s.spec_num_drafts);
    EXPECT_GE(s.spec_num_accepted_tokens + 2 * uint64_t(k), uint64_t(a) * s.spec_num_drafts);
    EXPECT_EQ(s.kv_blocks_used, 0);
    EXPECT_EQ(s.state_slots_used, 0);
  }
}

// Records and checkpoint + re-feed generate the same tokens (and logits) with drafts right up to random
// points, random k, in batches; records again with the decode graphs' padded steps run eagerly
// (capture_graphs false: the padding sequences copy a verify step but must not write records).
TEST_P(Speculative, ReplayRecordsEqualCheckpointAndReFeed) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  auto drafter = std::make_shared<ReferenceDrafter>(ReferenceDrafter::Mode::Random, seed);
  const auto ps = prompts(rng, 4);
  std::vector<Request> rs;
  for (const auto& p : ps) {
    rs.push_back({p, greedy(20 + int(rng() % 30))});
    drafter->learn(p, reference(rs.back()).ids);
  }
  const int k = 1 + int(rng() % 6);
  std::vector<Outcome> by_mode[3];
  for (int run = 0; run < 3; ++run) {
    EngineOptions o = speculating(k, drafter, 64);
    o.speculative.kda_rollback = run == 0 ? cache::KdaRollback::Checkpoint : cache::KdaRollback::Records;
    o.capture_graphs = run != 2;
    Harness on(current_fixture, o);
    by_mode[run] = on.run_all(rs);
    const EngineStats s = on.engine().stats();
    EXPECT_GT(s.spec_num_accepted_tokens, 0u);
    EXPECT_LT(s.spec_num_accepted_tokens, s.spec_num_draft_tokens);
    EXPECT_EQ(s.kv_blocks_used, 0);
    EXPECT_EQ(s.state_slots_used, 0);
  }
  for (size_t i = 0; i < rs.size(); ++i) {
    expect_same(by_mode[1][i], by_mode[0][i], "records vs checkpoint, request " + std::to_string(i));
    expect_same(by_mode[2][i], by_mode[0][i], "records in padded steps vs checkpoint, request " + std::to_string(i));
  }
}

// Stop ids and EOS inside an accepted run end the sequence at that token; later drafts are dropped.
TEST_P(Speculative, StopIdsInsideAcceptedDrafts) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  const auto ps = prompts(rng, 1);
  const Outcome plain = reference(ps[0], greedy(40));
  auto oracle = std::make_shared<ReferenceDrafter>(ReferenceDrafter::Mode::Oracle);
  oracle->learn(ps[0], plain.ids);
  Harness on(current_fixture, speculating(5, oracle));
  for (int at : {1, 6, 13, 22}) {
    SamplingParams p = greedy(40);
    p.stop_token_ids = {plain.ids[size_t(at)]};
    const Outcome want = reference(ps[0], p);
    ASSERT_EQ(want.reason, FinishReason::Stop);
    expect_same(on.run(ps[0], p), want, "stop id at " + std::to_string(at));
    SamplingParams q = greedy(40);  // the same, the model's EOS ids on too, and the stop id's text kept
    q.ignore_eos = false;
    q.stop_token_ids = {plain.ids[size_t(at)]};
    q.include_stop_str_in_output = true;
    expect_same(on.run(ps[0], q), reference(ps[0], q), "kept stop id at " + std::to_string(at));
  }
  for (int max_tokens : {1, 2, 3, 7, 11})
    expect_same(on.run(ps[0], greedy(max_tokens)), reference(ps[0], greedy(max_tokens)),
                "max_tokens " + std::to_string(max_tokens));
}

// Stop strings (the real Kimi vocabulary decodes the ids): one completed inside an accepted run ends the
// output there, exactly as one step per token does.
TEST_P(Speculative, StopStringsInsideAcceptedDrafts) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  auto t = text::Tokenizer::load(testing::shared_path(testing::kKimiTokenizerDir));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto tok = std::make_shared<const text::Tokenizer>(std::move(t).value());
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  const auto ps = prompts(rng, 1);
  const Outcome plain = reference(Request{ps[0], greedy(40)}, tok);
  ASSERT_EQ(plain.ids.size(), 40u);
  auto oracle = std::make_shared<ReferenceDrafter>(ReferenceDrafter::Mode::Oracle);
  oracle->learn(ps[0], plain.ids);
  Harness on(current_fixture, speculating(6, oracle), tok);
  for (int at : {2, 9, 17}) {
    // The text of tokens [at, at + 2): a stop string that completes at token at + 1 (or earlier).
    std::string stop;
    for (int i = at; i < at + 2; ++i) {
      auto piece = tok->decode(std::vector<int32_t>{plain.ids[size_t(i)]});
      if (piece.ok()) stop += *piece;
    }
    if (stop.empty()) continue;
    for (bool keep : {false, true}) {
      SamplingParams p = greedy(40);
      p.stop = {stop};
      p.include_stop_str_in_output = keep;
      const Outcome want = reference(Request{ps[0], p}, tok);
      expect_same(on.run(ps[0], p), want, "stop string at " + std::to_string(at) + (keep ? ", kept" : ""));
    }
  }
}

// Prefix caching on: warm prefixes (the same prompt again, a later turn that continues prompt + output) are
// served from blocks and snapshots of committed tokens only, whatever the drafts were. Both rollbacks: replay
// records with in-step snapshots, checkpoint + re-feed (up to the next block boundary) without.
TEST_P(Speculative, PrefixCachingWithWarmPrefixes) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  for (auto mode :
       {ReferenceDrafter::Mode::Wrong, ReferenceDrafter::Mode::Random, ReferenceDrafter::Mode::Oracle}) {
    SCOPED_TRACE("drafter mode " + std::to_string(int(mode)));
    auto drafter = std::make_shared<ReferenceDrafter>(mode, seed);
    const std::vector<int32_t> prompt = random_tokens(rng, 100);
    const Outcome first = reference(prompt, greedy(90));  // crosses block boundaries at 128 and 192
    std::vector<int32_t> turn2 = prompt;
    turn2.insert(turn2.end(), first.ids.begin(), first.ids.begin() + 70);
    const std::vector<int32_t> more = random_tokens(rng, 5);
    turn2.insert(turn2.end(), more.begin(), more.end());
    const Outcome second = reference(turn2, greedy(20));
    drafter->learn(prompt, first.ids);
    drafter->learn(turn2, second.ids);
    for (bool in_step : {true, false}) {
      EngineOptions o = speculating(4, drafter, 64);
      o.enable_prefix_caching = true;
      o.kda_snapshot_interval = 64;
      o.kda_snapshots_in_step = in_step;
      o.speculative.kda_rollback = in_step ? cache::KdaRollback::Records : cache::KdaRollback::Checkpoint;
      Harness on(current_fixture, o);
      expect_same(on.run(prompt, greedy(90)), first, "first");
      const Outcome again = on.run(prompt, greedy(90));
      expect_same(again, first, "again");
      EXPECT_GT(again.cached, 0);
      const Outcome next = on.run(turn2, greedy(20));
      expect_same(next, second, "next turn");
      EXPECT_GE(next.cached, 128);  // past the prompt: blocks the first request decoded with drafts
      // Seeded sampling from a warm prefix, with the greedy run's drafts (right only while it agrees).
      const Request sampled{prompt, seeded(40, seed, 2)};
      expect_same(on.run(sampled.prompt, sampled.params), reference(sampled), "seeded");
    }
  }
}

// Chunked prefill (small steps, several requests) and preemption (too few blocks for all of them), greedy
// and seeded.
TEST_P(Speculative, ChunkedPrefillAndPreemption) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  auto drafter = std::make_shared<ReferenceDrafter>(ReferenceDrafter::Mode::Random, seed);
  std::vector<Request> rs;
  std::vector<Outcome> want;
  for (int i = 0; i < 5; ++i) {
    // Greedy and seeded (with a penalty, logprobs or min_tokens): a rollback or a recomputation must also
    // keep the draw counters and penalty counts of the positions.
    rs.push_back({random_tokens(rng, 90 + rng() % 30), i % 2 ? seeded(40, seed + uint64_t(i), i) : greedy(40)});
    if (i == 1) rs.back().params.presence_penalty = 0.5f;
    if (i == 3) rs.back().params.logprobs = 1, rs.back().params.min_tokens = 10;
    want.push_back(reference(rs.back()));
    drafter->learn(rs.back().prompt, want.back().ids);
  }
  EngineOptions chunked = speculating(4, drafter, 16, 5);
  {
    Harness on(current_fixture, chunked);
    const auto got = on.run_all(rs);
    for (size_t i = 0; i < rs.size(); ++i)
      expect_same(got[i], want[i], "chunked, request " + std::to_string(i));
  }
  EngineOptions tight = speculating(4, drafter, 64, 5);
  tight.num_kv_blocks = 4;  // 256 positions for five sequences of 130 to 160 (three blocks each): preemption
  Harness on(current_fixture, tight);
  const auto got = on.run_all(rs);
  for (size_t i = 0; i < rs.size(); ++i)
    expect_same(got[i], want[i], "preemption, request " + std::to_string(i));
  EXPECT_GT(on.engine().stats().preemptions, 0u);
  EXPECT_EQ(on.engine().stats().kv_blocks_used, 0);
}

// A constraint that allows, at generated position k, the tokens allowed(k).
struct ScriptedConstraint : text::constraint::TokenConstraint {
  std::function<std::vector<int32_t>(size_t)> allowed;
  size_t n_accepted = 0;
  void allowed_tokens(std::span<uint32_t> mask) override {
    std::fill(mask.begin(), mask.end(), 0u);
    for (int32_t t : allowed(n_accepted)) mask[size_t(t) / 32] |= 1u << (t % 32);
  }
  void accept(int32_t) override { ++n_accepted; }
  std::unique_ptr<TokenConstraint> fork() const override { return std::make_unique<ScriptedConstraint>(*this); }
};

// Greedy requests share steps with sampled, penalised, logprobs, min_tokens, allowed_token_ids and
// grammar-constrained ones (all of which speculate): every request gets what it gets without speculation.
TEST_P(Speculative, MixedBatches) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  auto drafter = std::make_shared<ReferenceDrafter>(ReferenceDrafter::Mode::Random, seed);
  const auto ps = prompts(rng, 7);
  auto make = [&](int i) {
    Request r{ps[size_t(i)], greedy(24)};
    switch (i) {
      case 0:
      case 1:
        break;  // greedy
      case 2:
        r.params.temperature = 0.8f, r.params.seed = seed;
        break;
      case 3:
        r.params.frequency_penalty = 1.0f;
        break;
      case 4:
        r.params.logprobs = 2;
        break;
      case 5:
        r.params.min_tokens = 5, r.params.allowed_token_ids = {5, 6, 7, 8, 9, 10, 11, 12};
        break;
      case 6: {
        auto c = std::make_shared<ScriptedConstraint>();
        c->allowed = [](size_t k) { return std::vector<int32_t>{int32_t(100 + 3 * k), int32_t(200 + k)}; };
        r.constraint = c;
        break;
      }
    }
    return r;
  };
  std::vector<Outcome> want;
  for (int i = 0; i < 7; ++i) {
    want.push_back(reference(make(i)));
    drafter->learn(ps[size_t(i)], want.back().ids);
  }
  // allowed_token_ids alone (the same mask at every position).
  Request allowed{ps[0], greedy(24)};
  allowed.params.allowed_token_ids = {5, 6, 7, 8, 9, 10, 11, 12, 13};
  const Outcome want_allowed = reference(allowed);
  Harness on(current_fixture, speculating(3, drafter, 64, 8));
  std::vector<Request> rs;
  for (int i = 0; i < 7; ++i) rs.push_back(make(i));
  rs.push_back(allowed);
  const auto got = on.run_all(std::move(rs));
  for (int i = 0; i < 7; ++i) expect_same(got[size_t(i)], want[size_t(i)], "request " + std::to_string(i));
  expect_same(got[7], want_allowed, "allowed_token_ids");
  EXPECT_GT(on.engine().stats().spec_num_drafts, 0u);
}

// The real drafter through the config: prompt lookup on repetitive prompts finds drafts, and changes nothing.
TEST_P(Speculative, NgramDrafterThroughTheConfig) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  auto cfg = spec::parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1})");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EngineOptions o{.max_batch_size = 4, .max_num_tokens = 128};
  o.speculative = *cfg;
  Harness on(current_fixture, o);
  std::vector<Request> rs;
  for (const auto& p : prompts(rng, 3)) rs.push_back({p, greedy(40)});
  const auto got = on.run_all(rs);
  for (size_t i = 0; i < rs.size(); ++i)
    expect_same(got[i], reference(rs[i]), "request " + std::to_string(i));
  EXPECT_GT(on.engine().stats().spec_num_drafts, 0u);
  // The default rollback (records) sizes replay records, not checkpoint slots.
  EXPECT_NE(on.engine().memory_plan().find("KDA replay records"), std::string::npos)
      << on.engine().memory_plan();
  EXPECT_EQ(on.engine().memory_plan().find("checkpoint slots"), std::string::npos)
      << on.engine().memory_plan();
}

// Sampled requests speculate: with a seed, every verify row draws with the counter of its output position, so
// the tokens are those of the run without speculation, token for token, whatever the drafts (right,
// wrong, right up to a point). Near-ties of the inverse CDF could flip with the verify step's fp32 rounding
// (~1e-6 of a logit); that has probability ~1e-6 per token, far below what a wrong counter or rule does.
TEST_P(Speculative, SeededSamplingEqualsSamplingWithoutSpeculation) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  for (auto mode :
       {ReferenceDrafter::Mode::Oracle, ReferenceDrafter::Mode::Wrong, ReferenceDrafter::Mode::Random}) {
    SCOPED_TRACE("drafter mode " + std::to_string(int(mode)));
    auto drafter = std::make_shared<ReferenceDrafter>(mode, seed);
    std::vector<Request> rs;
    std::vector<Outcome> want;
    for (const auto& p : prompts(rng, 4)) {
      rs.push_back({p, seeded(16 + int(rng() % 12), rng(), int(rs.size()))});
      want.push_back(reference(rs.back()));
      drafter->learn(p, want.back().ids);
    }
    Harness on(current_fixture, speculating(1 + int(rng() % 5), drafter, 64));
    const auto got = on.run_all(rs);
    for (size_t i = 0; i < rs.size(); ++i) expect_same(got[i], want[i], "request " + std::to_string(i));
    const EngineStats s = on.engine().stats();
    EXPECT_GT(s.spec_num_drafts, 0u);
    if (mode == ReferenceDrafter::Mode::Oracle) {
      EXPECT_EQ(s.spec_num_accepted_tokens, s.spec_num_draft_tokens);
    }
    if (mode == ReferenceDrafter::Mode::Wrong) {
      EXPECT_EQ(s.spec_num_accepted_tokens, 0u);
    }
  }
}

// Sampling with speculation has the distribution of sampling without it: over many requests with different
// seeds on each side (so the two samples are independent), each token's frequency at each of the first
// sampled positions agrees within 5 binomial sigma. The drafts are the greedy continuation — the most likely
// token, so they are accepted often but not always — and position 0 (sampled by the prefill) is the control.
TEST_P(Speculative, SampledFrequenciesEqualSamplingWithoutSpeculation) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::vector<int32_t> prompt = random_tokens(rng, 12);
  constexpr int kPositions = 4, kRequests = 240;
  // Drafts after any sampled prefix: the greedy continuation of the prompt at the context's length (the
  // oracle above drafts only along its own run).
  struct Greedy final : spec::Drafter {
    std::vector<int32_t> prompt, next;
    std::vector<int32_t> propose(std::span<const int32_t> context, int max_tokens) const override {
      const size_t at = context.size() - prompt.size();
      if (at >= next.size()) return {};
      return {next.begin() + long(at), next.begin() + long(std::min(next.size(), at + size_t(max_tokens)))};
    }
  };
  auto drafter = std::make_shared<Greedy>();
  drafter->prompt = prompt;
  drafter->next = reference(prompt, greedy(kPositions + 4)).ids;
  auto params = [&](uint64_t s) {
    SamplingParams p = greedy(kPositions);
    p.temperature = 0.8f;
    p.top_k = 6;
    p.seed = s;
    return p;
  };
  auto counts = [&](Harness& h, uint64_t first_seed) {
    std::vector<Request> rs;
    for (int i = 0; i < kRequests; ++i) rs.push_back({prompt, params(first_seed + uint64_t(i))});
    std::vector<std::map<int32_t, int>> c(kPositions);
    for (const Outcome& o : h.run_all(rs)) {
      EXPECT_EQ(o.ids.size(), size_t(kPositions));
      for (size_t j = 0; j < o.ids.size() && j < kPositions; ++j) c[j][o.ids[j]]++;
    }
    return c;
  };
  const uint64_t base = uint64_t(seed) * 1000003u;
  Harness off(current_fixture, EngineOptions{.max_batch_size = 32, .max_num_tokens = 1024});
  Harness on(current_fixture, speculating(3, drafter, 1024, 32));
  const auto want = counts(off, base), got = counts(on, base + kRequests);
  for (int j = 0; j < kPositions; ++j) {
    std::set<int32_t> tokens;
    for (const auto& [t, n] : want[size_t(j)]) tokens.insert(t);
    for (const auto& [t, n] : got[size_t(j)]) tokens.insert(t);
    for (int32_t t : tokens) {
      const auto freq = [&](const std::map<int32_t, int>& m) {
        auto it = m.find(t);
        return it == m.end() ? 0.0 : double(it->second) / kRequests;
      };
      const double a = freq(got[size_t(j)]), b = freq(want[size_t(j)]), pooled = (a + b) / 2;
      const double sigma = std::sqrt(pooled * (1 - pooled) * 2.0 / kRequests);
      EXPECT_LE(std::abs(a - b), 5 * sigma + 1e-12)
          << "position " << j << " token " << t << ": " << a << " with speculation, " << b << " without";
    }
  }
  const EngineStats s = on.engine().stats();
  EXPECT_GT(s.spec_num_accepted_tokens, 0u);
  EXPECT_LT(s.spec_num_accepted_tokens, s.spec_num_draft_tokens);
}

// Row j of a verify step is processed as the step per token at its position: penalty counts with the
// drafts before it, min_tokens by its position, its own logprobs, the grammar's mask after the drafts before
// it (walked on a fork of the constraint). Greedy and seeded requests with each of those give the tokens,
// logits (after penalties and masks) and logprobs of the run without speculation; the oracle's drafts —
// the reference tokens — are then all accepted, which they are only if every row saw what it should.
TEST_P(Speculative, PenaltiesLogprobsMinTokensAndGrammarPerVerifiedPosition) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  const auto ps = prompts(rng, 8);
  const Outcome plain = reference(ps[3], greedy(24));
  auto make = [&](int i) {
    Request r{ps[size_t(i)], i % 2 ? seeded(24, seed + uint64_t(i), i) : greedy(24)};
    switch (i) {
      case 0:
        r.params.frequency_penalty = 0.7f, r.params.presence_penalty = 0.3f;
        break;
      case 1:
        r.params.repetition_penalty = 1.4f, r.params.frequency_penalty = -0.5f;
        break;
      case 2:
        r.params.logprobs = 3;
        break;
      case 3:  // a stop id the greedy run meets early: masked before min_tokens, a stop after
        r.params.min_tokens = 8, r.params.ignore_eos = false, r.params.logprobs = 0;
        r.params.stop_token_ids = {plain.ids[2], plain.ids[9]};
        r.params.presence_penalty = 0.2f;
        break;
      case 4:
      case 5:
      case 6: {
        auto c = std::make_shared<ScriptedConstraint>();
        c->allowed = [i](size_t k) {
          return std::vector<int32_t>{int32_t(100 + 3 * k), int32_t(200 + k), int32_t(300 + (k * i) % 50)};
        };
        r.constraint = c;
        if (i == 5) r.params.frequency_penalty = 0.4f, r.params.logprobs = 2;
        if (i == 6) r.params.min_tokens = 4, r.params.stop_token_ids = {200, 103};
        break;
      }
      case 7:
        r.params.min_tokens = 12, r.params.max_tokens = 12;  // masked throughout
        r.params.stop_token_ids = {plain.ids[1]};
        break;
    }
    return r;
  };
  for (auto mode :
       {ReferenceDrafter::Mode::Oracle, ReferenceDrafter::Mode::Wrong, ReferenceDrafter::Mode::Random}) {
    SCOPED_TRACE("drafter mode " + std::to_string(int(mode)));
    auto drafter = std::make_shared<ReferenceDrafter>(mode, seed);
    std::vector<Outcome> want;
    std::vector<Request> rs;
    for (int i = 0; i < 8; ++i) {
      want.push_back(reference(make(i)));
      drafter->learn(ps[size_t(i)], want.back().ids);
      rs.push_back(make(i));  // a fresh constraint
    }
    Harness on(current_fixture, speculating(4, drafter, 128, 8));
    const auto got = on.run_all(std::move(rs));
    for (int i = 0; i < 8; ++i) expect_same(got[size_t(i)], want[size_t(i)], "request " + std::to_string(i));
    const EngineStats s = on.engine().stats();
    EXPECT_GT(s.spec_num_drafts, 0u);
    if (mode == ReferenceDrafter::Mode::Oracle) {
      EXPECT_EQ(s.spec_num_accepted_tokens, s.spec_num_draft_tokens);
    }
    if (mode == ReferenceDrafter::Mode::Wrong) {
      EXPECT_EQ(s.spec_num_accepted_tokens, 0u);
    }
  }
}

// A real grammar (a JSON Schema through the Kimi vocabulary's token masker): drafts are cut at the first
// token the grammar rejects, the later rows' masks come from a fork of the constraint, and the output is
// that of the run without speculation; the oracle's drafts are all accepted.
TEST_P(Speculative, JsonSchemaConstrainedDecoding) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  auto t = text::Tokenizer::load(testing::shared_path(testing::kKimiTokenizerDir));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto tok = std::make_shared<const text::Tokenizer>(std::move(t).value());
  // Holds views of the tokenizer's bytes: built from this test's tokenizer, which outlives it.
  const auto masker = std::make_shared<const text::constraint::TokenMasker>(*tok);
  const auto schema = nlohmann::ordered_json::parse(
      R"({"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999}, "maxItems": 5})");
  auto grammar = text::constraint::json_grammar(&schema);
  ASSERT_TRUE(grammar.ok()) << grammar.status().to_string();
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  const auto ps = prompts(rng, 3);
  auto make = [&](size_t i) {
    Request r{ps[i], i == 1 ? seeded(30, seed, 2) : greedy(30)};
    r.params.ignore_eos = false;
    r.constraint = std::make_shared<text::constraint::GrammarConstraint>(*grammar, masker, std::vector<int32_t>{2});
    return r;
  };
  for (auto mode : {ReferenceDrafter::Mode::Oracle, ReferenceDrafter::Mode::Random}) {
    SCOPED_TRACE("drafter mode " + std::to_string(int(mode)));
    auto drafter = std::make_shared<ReferenceDrafter>(mode, seed);
    std::vector<Outcome> want;
    std::vector<Request> rs;
    for (size_t i = 0; i < ps.size(); ++i) {
      want.push_back(reference(make(i), tok));
      drafter->learn(ps[i], want.back().ids);
      rs.push_back(make(i));
    }
    Harness on(current_fixture, speculating(4, drafter, 128, 4), tok);
    const auto got = on.run_all(std::move(rs));
    for (size_t i = 0; i < ps.size(); ++i) {
      expect_same(got[i], want[i], "request " + std::to_string(i));
      EXPECT_TRUE(nlohmann::json::accept(got[i].text) || got[i].reason == FinishReason::Length) << got[i].text << " ids " << ::testing::PrintToString(got[i].ids) << " reason " << int(got[i].reason);
    }
    const EngineStats s = on.engine().stats();
    EXPECT_GT(s.spec_num_drafts, 0u);
    if (mode == ReferenceDrafter::Mode::Oracle) {
      EXPECT_EQ(s.spec_num_accepted_tokens, s.spec_num_draft_tokens);
    }
  }
}

// Break-even: a sequence whose drafts are always wrong speculates for exactly min_steps verify steps (its
// average is 0 from the first) and then decodes one token per step; one that accepts exactly one draft per
// step stops only where the threshold is above 1; the oracle's never stop. The output is unchanged.
TEST_P(Speculative, SpeculationStopsBelowBreakEven) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  const auto ps = prompts(rng, 3);
  std::vector<Request> rs;
  std::vector<Outcome> want;
  for (size_t i = 0; i < ps.size(); ++i) {
    rs.push_back({ps[i], i == 2 ? seeded(40, seed, 1) : greedy(40)});
    want.push_back(reference(rs.back()));
  }
  struct Case {
    ReferenceDrafter::Mode mode;
    spec::BreakEvenRule rule;
    uint64_t stopped;  // of the 3 sequences
  };
  const spec::BreakEvenRule defaults;
  const Case cases[] = {
      {ReferenceDrafter::Mode::Wrong, defaults, 3},
      {ReferenceDrafter::Mode::Wrong, {.min_steps = 3, .weight = 0.5, .break_even = 0.01}, 3},
      {ReferenceDrafter::Mode::FirstRight, defaults, 0},
      {ReferenceDrafter::Mode::FirstRight, {.min_steps = 5, .weight = 0.25, .break_even = 1.5}, 3},
      {ReferenceDrafter::Mode::Oracle, {.min_steps = 1, .weight = 1, .break_even = 1}, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("drafter mode " + std::to_string(int(c.mode)) + ", min_steps " +
                 std::to_string(c.rule.min_steps) + ", break_even " + std::to_string(c.rule.break_even));
    auto drafter = std::make_shared<ReferenceDrafter>(c.mode, seed);
    for (size_t i = 0; i < ps.size(); ++i) drafter->learn(ps[i], want[i].ids);
    EngineOptions o = speculating(3, drafter, 256, 4);
    o.speculation_break_even = c.rule;
    Harness on(current_fixture, o);
    const auto got = on.run_all(rs);
    for (size_t i = 0; i < rs.size(); ++i) expect_same(got[i], want[i], "request " + std::to_string(i));
    const EngineStats s = on.engine().stats();
    EXPECT_EQ(s.spec_num_stopped_sequences, c.stopped);
    if (c.stopped > 0) {
      // Each stopped exactly when the rule fired: the verify steps before are all it drafted.
      EXPECT_EQ(s.spec_num_drafts, c.stopped * uint64_t(c.rule.min_steps));
    } else {
      EXPECT_GT(s.spec_num_drafts, 3u * uint64_t(c.rule.min_steps));
    }
  }
}

// The suffix drafter through the config: drafts from the request's own context change nothing; a request
// that repeats an earlier one drafts from that one's output (the cache of recent outputs) and has more of
// its drafts accepted than the first time.
TEST_P(Speculative, SuffixDrafterThroughTheConfig) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  auto cfg = spec::parse_speculative_config(
      R"({"method": "suffix", "num_speculative_tokens": 4, "suffix_decoding_max_spec_factor": 4})");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EngineOptions o{.max_batch_size = 4, .max_num_tokens = 128};
  o.speculative = *cfg;
  o.speculation_break_even.min_steps = INT_MAX;
  Harness on(current_fixture, o);
  std::vector<Request> rs;
  for (const auto& p : prompts(rng, 3)) rs.push_back({p, greedy(32)});
  const auto got = on.run_all(rs);
  for (size_t i = 0; i < rs.size(); ++i)
    expect_same(got[i], reference(rs[i]), "request " + std::to_string(i));
  EXPECT_GT(on.engine().stats().spec_num_drafts, 0u);
  // The same fresh prompt twice, one after the other.
  const Request fresh{random_tokens(rng, 30), greedy(40)};
  const Outcome want = reference(fresh);
  const uint64_t before = on.engine().stats().spec_num_accepted_tokens;
  expect_same(on.run(fresh.prompt, fresh.params), want, "first");
  const uint64_t first = on.engine().stats().spec_num_accepted_tokens - before;
  expect_same(on.run(fresh.prompt, fresh.params), want, "again");
  const uint64_t again = on.engine().stats().spec_num_accepted_tokens - before - first;
  EXPECT_GT(again, first);
  EXPECT_GE(again, 20u) << "the earlier output drafts most of the 39 tokens after the first";
}

// A draft model (run by the executor beside the target, on its backend, with caches of its own): the target's
// own checkpoint as the draft proposes the target's greedy continuation, so every draft is accepted; another
// checkpoint with the same vocabulary proposes something else, and the output is unchanged either way.
TEST_P(Speculative, DraftModelDrafter) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  std::vector<Request> rs;
  std::vector<Outcome> want;
  for (const auto& p : prompts(rng, 2)) {
    rs.push_back({p, greedy(24)});
    want.push_back(reference(rs.back()));
  }
  for (const std::string& draft : {current_fixture, std::string("kimi_linear_tiny_a")}) {
    SCOPED_TRACE("draft model " + draft);
    EngineOptions o{.max_batch_size = 4, .max_num_tokens = 128};
    o.speculative.method = "draft_model";
    o.speculative.num_speculative_tokens = 3;
    o.speculative.draft_model = testing::engine_model_dir(draft);
    o.speculation_break_even.min_steps = INT_MAX;
    Harness on(current_fixture, o);
    const auto got = on.run_all(rs);
    for (size_t i = 0; i < rs.size(); ++i) expect_same(got[i], want[i], "request " + std::to_string(i));
    const EngineStats s = on.engine().stats();
    EXPECT_GT(s.spec_num_drafts, 0u);
    if (draft == current_fixture) {
      EXPECT_EQ(s.spec_num_accepted_tokens, s.spec_num_draft_tokens);
    } else {
      EXPECT_LT(s.spec_num_accepted_tokens, s.spec_num_draft_tokens);
    }
  }
}

// A step's proposals go to the draft model together: it answers them with the tokens it gives each alone
// (greedy), in fewer steps than one query after another would take (its decode steps serve all of them).
TEST_P(Speculative, DraftModelAnswersAStepsProposalsInOneBatch) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  auto be = backend::make_cpu_backend();
  runner::RunnerOptions target{.max_batch_size = 4, .max_num_tokens = 256};
  target.draft.dir = testing::engine_model_dir(current_fixture);
  const int64_t vocab = model::ModelConfig::load(target.draft.dir).value().vocab_size;
  auto make = [&]() {
    auto d = runner::DraftProposer::create(*be, target, vocab);
    EXPECT_TRUE(d.ok()) << d.status().to_string();
    return std::move(d).value();
  };
  const auto contexts = prompts(rng, 3);
  const int k = 5;
  std::vector<runner::DraftRequest> queries;
  for (const auto& c : contexts) queries.push_back({c, k});

  std::unique_ptr<runner::DraftProposer> one_by_one = make();
  std::vector<std::vector<int32_t>> alone;
  for (const auto& q : queries) alone.push_back(one_by_one->propose({&q, 1}).front());
  std::unique_ptr<runner::DraftProposer> batched = make();
  const auto together = batched->propose(queries);

  ASSERT_EQ(together.size(), alone.size());
  for (size_t i = 0; i < alone.size(); ++i) {
    EXPECT_EQ(together[i], alone[i]) << "query " << i;
    EXPECT_EQ(int(alone[i].size()), k) << "query " << i;
  }
  // Alone: each query takes at least its prefill step and k - 1 decode steps. Together: the decode steps
  // serve all three (the 32-71-token prompts fit one 256-token step, a prefill chunk cut at a KDA snapshot
  // position at most adds one).
  EXPECT_GE(one_by_one->steps(), uint64_t(contexts.size() * k));
  EXPECT_LE(batched->steps(), uint64_t(k + 1));
}

// Queries the draft model cannot answer get no drafts, without holding up the others of their step: no room
// left in its context, nothing asked for, an empty context; one near the end of the context gets what fits.
TEST_P(Speculative, DraftModelAnswersWhatItCan) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  auto be = backend::make_cpu_backend();
  runner::RunnerOptions target{.max_batch_size = 4, .max_num_tokens = 64, .max_model_len = 96};
  target.draft.dir = testing::engine_model_dir(current_fixture);
  const int64_t vocab = model::ModelConfig::load(target.draft.dir).value().vocab_size;
  auto d = runner::DraftProposer::create(*be, target, vocab);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  const std::vector<int32_t> fits = random_tokens(rng, 40), too_long = random_tokens(rng, 96),
                             near_end = random_tokens(rng, 93);
  const std::vector<runner::DraftRequest> queries = {
      {fits, 4}, {too_long, 4}, {fits, 0}, {{}, 4}, {near_end, 4}};
  const auto got = (*d)->propose(queries);
  ASSERT_EQ(got.size(), queries.size());
  EXPECT_EQ(got[0].size(), 4u);
  EXPECT_TRUE(got[1].empty()) << "a context as long as the draft's max_model_len";
  EXPECT_TRUE(got[2].empty());
  EXPECT_TRUE(got[3].empty());
  EXPECT_EQ(got[4].size(), 3u) << "96 - 93 positions left";
  EXPECT_EQ((*d)->propose({&queries[0], 1}).front(), got[0]) << "the same answer alone, from its prefix cache";
}

// A draft model whose vocabulary is not the target's is refused when the executor is made, naming both sizes.
TEST_P(Speculative, DraftModelWithAnotherVocabularyIsRefused) {
  auto be = backend::make_cpu_backend();
  runner::RunnerOptions target{.max_batch_size = 2, .max_num_tokens = 64};
  target.draft.dir = testing::engine_model_dir(current_fixture);
  const int64_t vocab = model::ModelConfig::load(target.draft.dir).value().vocab_size;
  auto d = runner::DraftProposer::create(*be, target, vocab + 1);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("vocabulary has " + std::to_string(vocab) + " tokens"), std::string::npos)
      << d.status().message();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Speculative,
                         ::testing::Values("kimi_linear_tiny_b", "kimi_k3_tiny_a_all_experts"));

}  // namespace
}  // namespace rill::engine
