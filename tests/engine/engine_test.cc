// The engine on the CPU backend with the transformers fixtures: greedy output equals transformers' greedy
// continuation; concurrent, chunked and preempted requests produce exactly what they produce alone; cancels
// and finishes free every block and slot; seeded sampling is reproducible.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "model/fixture.h"
#include "model/model.h"
#include "test_seed.h"
#include "text/constraint/token_constraint.h"

namespace rill::engine {
namespace {

struct Outcome {
  std::vector<int32_t> ids;
  FinishReason reason = FinishReason::Error;
  int prompt_tokens = 0, completion_tokens = 0;
};

Outcome collect(const std::shared_ptr<RequestStream>& s) {
  Outcome o;
  StreamEvent ev;
  while (s->next(&ev, std::chrono::seconds(120))) {
    o.ids.insert(o.ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finish) {
      o.reason = *ev.finish;
      o.prompt_tokens = ev.prompt_tokens;
      o.completion_tokens = ev.completion_tokens;
      return o;
    }
  }
  ADD_FAILURE() << "request timed out";
  return o;
}

std::unique_ptr<Engine> make_engine(const std::string& fixture, EngineOptions o) {
  auto be = backend::make_cpu_backend();
  auto m = model::load_model(testing::data_dir() / fixture, *be);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  static std::vector<std::unique_ptr<backend::Backend>> keep;  // backends outlive their engines
  keep.push_back(std::move(be));
  auto e = Engine::create(std::move(m).value(), nullptr, o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return std::move(e).value();
}

SamplingParams greedy(int n) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

TEST(Engine, GreedyMatchesTransformers) {
  auto e = make_engine("kimi_linear_tiny_a", EngineOptions{.max_batch_size = 4, .max_num_tokens = 32});
  testing::Reference ref(testing::data_dir() / "kimi_linear_tiny_a");
  for (int p = 0; p < ref.n_prompts(); ++p) {
    auto s = e->submit({ref.ints("prompt_" + std::to_string(p)), greedy(12)});
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    const Outcome o = collect(*s);
    EXPECT_EQ(o.ids, ref.ints("greedy_" + std::to_string(p))) << "prompt " << p;
    EXPECT_EQ(o.reason, FinishReason::Length);
    EXPECT_EQ(o.completion_tokens, 12);
    EXPECT_EQ(o.prompt_tokens, int(ref.ints("prompt_" + std::to_string(p)).size()));
  }
}

// Many concurrent requests under a small token budget (chunked prefill, mixed steps) and, separately, a cache
// too small for all of them (preemption): each greedy output equals the request run alone.
void concurrent_equals_alone(EngineOptions o, bool expect_preemption) {
  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 12; ++i) {
    // For preemption every prompt fits one 64-token block but its 10 generated tokens cross into a second:
    // running sequences must grow while the cache is full, whatever the seed and the arrival timing.
    const size_t len = expect_preemption ? 56 + rng() % 8 : 1 + rng() % 150;
    std::vector<int32_t> p(len);
    for (auto& x : p) x = int32_t(rng() % 512);
    prompts.push_back(p);
  }
  auto alone = make_engine("kimi_linear_tiny_b", EngineOptions{.max_batch_size = 1, .max_num_tokens = 256});
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(collect(*alone->submit({p, greedy(10)})).ids);
  auto e = make_engine("kimi_linear_tiny_b", o);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : prompts) streams.push_back(*e->submit({p, greedy(10)}));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(collect(streams[i]).ids, want[i]) << "request " << i;
  const EngineStats st = e->stats();
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.state_slots_used, 0);
  if (expect_preemption) {
    EXPECT_GT(st.preemptions, 0u);
  }
}

TEST(Engine, ConcurrentChunkedRequestsEqualAlone) {
  concurrent_equals_alone(EngineOptions{.max_batch_size = 8, .max_num_tokens = 40}, false);
}

TEST(Engine, PreemptionUnderATinyCacheStillEqualsAlone) {
  // 3 blocks of 64 tokens for up to 8 sequences that each grow from one block to two: blocks run out, the
  // newest requests are recomputed.
  concurrent_equals_alone(EngineOptions{.max_batch_size = 8, .max_num_tokens = 64, .num_kv_blocks = 3}, true);
}

TEST(Engine, CancelFreesEverything) {
  auto e = make_engine("kimi_linear_tiny_a", EngineOptions{.max_batch_size = 4, .max_num_tokens = 64});
  auto s = *e->submit({{1, 2, 3, 4, 5}, greedy(100000 / 1000)});
  StreamEvent ev;
  ASSERT_TRUE(s->next(&ev, std::chrono::seconds(60)));
  e->cancel(s->id());
  Outcome o = collect(s);
  EXPECT_EQ(o.reason, FinishReason::Cancelled);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
  EXPECT_EQ(e->stats().state_slots_used, 0);
}

// vLLM's queue / prefill times and iteration tokens: the last event carries the two phase times (earlier ones
// -1), bounded by the wall time the test measured around the request; with one request, a prompt chunked over
// 3 steps (8 + 8 + 4 tokens at 8 per step) and 5 tokens, the iteration tokens are 8, 8, 4 + 1, then 1 per
// decode step: 3 + 4 steps summing to 25.
TEST(Engine, PhaseTimesAndIterationTokens) {
  auto e = make_engine("kimi_linear_tiny_a", EngineOptions{.max_batch_size = 2, .max_num_tokens = 8});
  std::vector<int32_t> prompt(20);
  for (int i = 0; i < 20; ++i) prompt[size_t(i)] = 10 + i;
  const auto t0 = std::chrono::steady_clock::now();
  auto s = *e->submit({prompt, greedy(5)});
  StreamEvent ev;
  int n = 0;
  bool finished = false;
  while (!finished && s->next(&ev, std::chrono::seconds(60))) {
    finished = ev.finish.has_value();
    n += int(ev.token_ids.size());
    if (!finished) {
      EXPECT_EQ(ev.queue_seconds, -1);
      EXPECT_EQ(ev.prefill_seconds, -1);
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(finished);
  EXPECT_EQ(n, 5);
  EXPECT_GE(ev.queue_seconds, 0);
  EXPECT_GT(ev.prefill_seconds, 0);
  EXPECT_LE(ev.queue_seconds + ev.prefill_seconds, wall);
  const EngineStats st = e->stats();
  EXPECT_EQ(st.steps, 7u);
  EXPECT_EQ(st.iteration_tokens_sum, 25u);
  uint64_t count = 0;
  for (uint64_t c : st.iteration_tokens_counts) count += c;
  EXPECT_EQ(count, st.steps);
  EXPECT_EQ(st.iteration_tokens_counts[0], 4u);  // <= 1: the 4 decode steps
  EXPECT_EQ(st.iteration_tokens_counts[1], 3u);  // (1, 8]: 8, 8 and 4 + 1
}

// The engine thread is held inside a step (its logits hook waits) while one thread submits and another reads
// stats(). Neither may touch what the engine thread changes outside the lock (the scheduler's running list,
// the incoming queue), and the engine must not hold that lock across the step (submit would wait for the
// step, and the step for the submit, until the hook gives up). The threads signal each other only through
// relaxed flags, which order nothing, so ThreadSanitizer reports any unlocked access however the threads
// interleave.
TEST(Engine, SubmitAndStatsWhileTheEngineThreadIsInsideAStep) {
  constexpr auto relaxed = std::memory_order_relaxed;
  std::atomic<bool> submitted{false}, read_stats{false}, hook_saw_both{false};
  std::atomic<int> hook_calls{0};
  EngineOptions o{.max_batch_size = 4, .max_num_tokens = 64};
  o.logits_hook = [&](uint64_t, int32_t, std::span<const float>) {
    if (hook_calls.fetch_add(1, relaxed) != 0) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!(submitted.load(relaxed) && read_stats.load(relaxed)) &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    hook_saw_both.store(submitted.load(relaxed) && read_stats.load(relaxed), relaxed);
  };
  auto e = make_engine("kimi_linear_tiny_a", o);
  auto first = e->submit({{1, 2, 3, 4}, greedy(2)});
  ASSERT_TRUE(first.ok());
  while (hook_calls.load(relaxed) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  Result<std::shared_ptr<RequestStream>> second = unavailable("not submitted");
  std::thread client([&] {
    second = e->submit({{5, 6, 7}, greedy(2)});  // checks the queue length while the step runs
    submitted.store(true, relaxed);
  });
  std::thread watcher([&] {
    while (!submitted.load(relaxed)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const EngineStats st = e->stats();
    EXPECT_EQ(st.running, 1);  // the request inside the step
    EXPECT_EQ(st.waiting, 1);  // the one just submitted
    read_stats.store(true, relaxed);
  });
  client.join();
  watcher.join();
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  const Outcome a = collect(*first), b = collect(*second);
  EXPECT_TRUE(hook_saw_both.load()) << "submit() or stats() waited for the engine's step";
  EXPECT_EQ(a.ids.size(), 2u);
  EXPECT_EQ(b.ids.size(), 2u);
  EXPECT_EQ(e->stats().requests_finished, 2u);
}

// Server threads call submit(), stats() and cancel() while the engine thread schedules and steps: they see
// only what the engine publishes under its lock, never the scheduler's queues themselves (a ThreadSanitizer
// build, -DRILL_SANITIZE=thread, reports any unsynchronised read). What they read is checked as well: gauges
// within their capacities, counters that never go back, and a caller that has seen every request finish sees
// them all counted and their caches freed.
TEST(Engine, SubmitStatsAndCancelFromManyThreadsWhileTheEngineRuns) {
  constexpr int kClients = 4, kRequestsEach = 6, kTokens = 3;
  const EngineOptions o{.max_batch_size = 3, .max_num_tokens = 24};
  auto e = make_engine("kimi_linear_tiny_a", o);
  std::atomic<bool> clients_done{false};
  std::thread watcher([&] {
    EngineStats last;
    while (!clients_done) {
      const EngineStats st = e->stats();
      EXPECT_LE(st.running, o.max_batch_size);
      EXPECT_GE(st.waiting, 0);
      EXPECT_LE(st.kv_blocks_used, st.kv_blocks_total);
      EXPECT_LE(st.state_slots_used, st.state_slots_total);
      EXPECT_GE(st.requests_finished, last.requests_finished);
      EXPECT_GE(st.steps, last.steps);
      EXPECT_GE(st.generation_tokens_total, last.generation_tokens_total);
      last = st;
    }
  });
  std::vector<std::thread> clients;
  std::atomic<int> cancelled{0};
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&, c] {
      for (int r = 0; r < kRequestsEach; ++r) {
        const std::vector<int32_t> prompt = {int32_t(1 + c), int32_t(2 + r), 3, 4, 5, int32_t(6 + c * r)};
        auto s = e->submit({prompt, greedy(kTokens)});
        ASSERT_TRUE(s.ok()) << s.status().to_string();
        (void)e->stats();
        if (r == kRequestsEach - 1) e->cancel((*s)->id());  // finishes as cancelled or, if too late, length
        const Outcome out = collect(*s);
        if (out.reason == FinishReason::Cancelled) {
          cancelled++;
        } else {
          EXPECT_EQ(out.reason, FinishReason::Length);
          EXPECT_EQ(out.ids.size(), size_t(kTokens));
        }
      }
    });
  for (auto& t : clients) t.join();
  clients_done = true;
  watcher.join();
  const EngineStats st = e->stats();
  EXPECT_EQ(st.requests_finished, uint64_t(kClients * kRequestsEach));
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.waiting, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.state_slots_used, 0);
  EXPECT_LE(cancelled.load(), kClients);
}

TEST(Engine, SeededSamplingIsReproducibleAndRejectsBadInput) {
  auto e = make_engine("kimi_linear_tiny_b", EngineOptions{.max_batch_size = 4, .max_num_tokens = 64});
  SamplingParams p = greedy(20);
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  p.seed = 5;
  const auto a = collect(*e->submit({{7, 8, 9}, p})).ids, b = collect(*e->submit({{7, 8, 9}, p})).ids;
  EXPECT_EQ(a, b);
  p.seed = 6;
  EXPECT_NE(collect(*e->submit({{7, 8, 9}, p})).ids, a);
  p.temperature = -1;
  auto bad = e->submit({{1}, p});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("temperature"), std::string::npos);
  EXPECT_FALSE(e->submit({{}, greedy(1)}).ok());
  EXPECT_FALSE(e->submit({{99999}, greedy(1)}).ok());
  std::vector<int32_t> huge(static_cast<size_t>(e->max_model_len()), 1);
  auto too_long = e->submit({huge, greedy(1)});
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("context"), std::string::npos);
}

TEST(Engine, StopTokenIdsAndPenaltiesAndLogprobs) {
  auto e = make_engine("kimi_linear_tiny_a", EngineOptions{.max_batch_size = 4, .max_num_tokens = 64});
  testing::Reference ref(testing::data_dir() / "kimi_linear_tiny_a");
  const auto prompt = ref.ints("prompt_2"), want = ref.ints("greedy_2");
  SamplingParams p = greedy(12);
  p.stop_token_ids = {want[3]};
  Outcome o = collect(*e->submit({prompt, p}));
  EXPECT_EQ(o.reason, FinishReason::Stop);
  const auto first = std::find(want.begin(), want.end(), want[3]);  // stops at the id's first occurrence
  EXPECT_EQ(o.ids, std::vector<int32_t>(want.begin(), first + 1));  // the stop id is reported, then it ends
  p = greedy(12);
  p.frequency_penalty = 2.0f;  // discourages repeats: greedy output must change unless it had none
  p.logprobs = 3;
  auto s = *e->submit({prompt, p});
  StreamEvent ev;
  std::vector<TokenLogprob> lps;
  while (s->next(&ev, std::chrono::seconds(60))) {
    lps.insert(lps.end(), ev.logprobs.begin(), ev.logprobs.end());
    if (ev.finish) break;
  }
  ASSERT_EQ(lps.size(), 12u);
  for (const auto& lp : lps) {
    EXPECT_LE(lp.logprob, 0.0f);
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_GE(lp.top[0].second, lp.top[1].second);
    EXPECT_LE(lp.logprob, lp.top[0].second + 1e-6f);  // greedy on penalised logits: the top token
  }
}

// A constraint that allows, at generated position k, the tokens allowed(k), and records what it is told.
struct ScriptedConstraint : text::constraint::TokenConstraint {
  std::function<std::vector<int32_t>(size_t)> allowed;
  std::vector<int32_t> accepted;
  void allowed_tokens(std::span<uint32_t> mask) override {
    std::fill(mask.begin(), mask.end(), 0u);
    for (int32_t t : allowed(accepted.size())) mask[size_t(t) / 32] |= 1u << (t % 32);
  }
  void accept(int32_t token) override { accepted.push_back(token); }
};

// Constrained rows sample only what their constraint allows (greedy, seeded, with logprobs of the masked
// distribution), are told every token they sampled, and leave the unconstrained rows of the same steps as
// they are alone.
TEST(Engine, ConstrainedRequestsSampleOnlyAllowedTokens) {
  auto e = make_engine("kimi_linear_tiny_a", EngineOptions{.max_batch_size = 4, .max_num_tokens = 64});
  const std::vector<int32_t> prompt = {11, 12, 13, 14};
  const auto alone = collect(*e->submit({prompt, greedy(10)})).ids;
  auto forced = std::make_shared<ScriptedConstraint>();
  forced->allowed = [](size_t k) { return std::vector<int32_t>{int32_t(100 + 7 * k)}; };
  auto pair = std::make_shared<ScriptedConstraint>();
  pair->allowed = [](size_t k) { return std::vector<int32_t>{int32_t(3 * k + 1), int32_t(500 - k)}; };
  SamplingParams seeded = greedy(10);
  seeded.temperature = 1.0f;
  seeded.seed = 3;
  SamplingParams with_logprobs = greedy(10);
  with_logprobs.logprobs = 3;
  auto s_forced = *e->submit({prompt, seeded, -1, forced});
  auto s_free = *e->submit({prompt, greedy(10)});
  auto s_pair = *e->submit({prompt, with_logprobs, -1, pair});
  const Outcome o_forced = collect(s_forced), o_free = collect(s_free);
  std::vector<TokenLogprob> lps;
  std::vector<int32_t> pair_ids;
  StreamEvent ev;
  while (s_pair->next(&ev, std::chrono::seconds(60))) {
    lps.insert(lps.end(), ev.logprobs.begin(), ev.logprobs.end());
    pair_ids.insert(pair_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finish) break;
  }
  EXPECT_EQ(o_free.ids, alone);
  ASSERT_EQ(o_forced.ids.size(), 10u);
  for (size_t k = 0; k < 10; ++k) EXPECT_EQ(o_forced.ids[k], int32_t(100 + 7 * k));
  EXPECT_EQ(forced->accepted, o_forced.ids);
  ASSERT_EQ(pair_ids.size(), 10u);
  ASSERT_EQ(lps.size(), 10u);
  EXPECT_EQ(pair->accepted, pair_ids);
  for (size_t k = 0; k < 10; ++k) {
    const auto allowed = pair->allowed(k);
    EXPECT_TRUE(pair_ids[k] == allowed[0] || pair_ids[k] == allowed[1]) << k;
    // Greedy over the masked logits: the best allowed token; its two entries carry all the probability.
    EXPECT_EQ(lps[k].top[0].first, pair_ids[k]);
    EXPECT_NEAR(std::exp(lps[k].top[0].second) + std::exp(lps[k].top[1].second), 1.0, 1e-5);
    EXPECT_TRUE(std::isinf(lps[k].top[2].second));
  }
}

// A ScriptedConstraint whose mask computation blocks until released: a stand-in for an expensive grammar
// state (a huge enum) whose mask takes long.
struct BlockingConstraint : ScriptedConstraint {
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  std::atomic<int> waiting{0};
  void allowed_tokens(std::span<uint32_t> mask) override {
    {
      std::unique_lock lock(mu);
      ++waiting;
      cv.wait(lock, [&] { return released; });
      --waiting;
    }
    ScriptedConstraint::allowed_tokens(mask);
  }
  void release() {
    {
      std::lock_guard lock(mu);
      released = true;
    }
    cv.notify_all();
  }
};

// Events of `s` until it finishes or `deadline` passes (then `finished` is false).
Outcome collect_until(const std::shared_ptr<RequestStream>& s, std::chrono::steady_clock::time_point deadline,
                      bool* finished) {
  Outcome o;
  StreamEvent ev;
  *finished = false;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!s->next(&ev, std::chrono::milliseconds(50))) continue;
    o.ids.insert(o.ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finish) {
      o.reason = *ev.finish;
      *finished = true;
      break;
    }
  }
  return o;
}

// A constrained request whose mask is slow sits out of the steps (not preempted, nothing sampled for it)
// while an unconstrained one decodes to the end: the mask used to be computed on the engine thread inside
// the step, which stalled every other request for as long. Released, it produces what it produces
// unhindered.
TEST(Engine, SlowMaskDoesNotStallOtherRequests) {
  auto e = make_engine("kimi_linear_tiny_a",
                       EngineOptions{.max_batch_size = 4, .max_num_tokens = 64, .mask_threads = 1});
  const std::vector<int32_t> prompt = {11, 12, 13, 14}, other = {21, 22, 23};
  auto allowed = [](size_t k) { return std::vector<int32_t>{int32_t(3 * k + 1), int32_t(500 - k)}; };
  auto plain = std::make_shared<ScriptedConstraint>();
  plain->allowed = allowed;
  const std::vector<int32_t> want = collect(*e->submit({prompt, greedy(8), -1, plain})).ids;
  const std::vector<int32_t> other_alone = collect(*e->submit({other, greedy(24)})).ids;
  ASSERT_EQ(want.size(), 8u);

  auto slow = std::make_shared<BlockingConstraint>();
  slow->allowed = allowed;
  auto s_slow = *e->submit({prompt, greedy(8), -1, slow});
  auto s_other = *e->submit({other, greedy(24)});
  bool finished = false;
  const Outcome o_other =
      collect_until(s_other, std::chrono::steady_clock::now() + std::chrono::seconds(30), &finished);
  EXPECT_TRUE(finished) << "the unconstrained request stalled behind the slow mask (" << o_other.ids.size()
                        << " of 24 tokens)";
  EXPECT_EQ(o_other.ids, other_alone);
  EXPECT_EQ(slow->waiting.load(), 1);  // still computing its first mask
  EXPECT_TRUE(slow->accepted.empty());
  EXPECT_EQ(e->stats().preemptions, 0u);
  StreamEvent ev;
  EXPECT_FALSE(s_slow->next(&ev, std::chrono::milliseconds(0)));
  slow->release();
  const Outcome o_slow = collect(s_slow);
  EXPECT_EQ(o_slow.ids, want);
  EXPECT_EQ(slow->accepted, want);
}

// Cancelling a request whose mask is being computed ends it at once; the mask job finishes later on its
// own copy of the constraint (TSan: nothing touches the freed sequence), and the engine shuts down after.
TEST(Engine, CancelWhileMaskIsComputed) {
  auto e = make_engine("kimi_linear_tiny_a",
                       EngineOptions{.max_batch_size = 4, .max_num_tokens = 64, .mask_threads = 2});
  auto slow = std::make_shared<BlockingConstraint>();
  slow->allowed = [](size_t k) { return std::vector<int32_t>{int32_t(k + 1)}; };
  auto s = *e->submit({{11, 12, 13}, greedy(8), -1, slow});
  while (slow->waiting.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  e->cancel(s->id());
  bool finished = false;
  const Outcome o = collect_until(s, std::chrono::steady_clock::now() + std::chrono::seconds(30), &finished);
  EXPECT_TRUE(finished);
  EXPECT_EQ(o.reason, FinishReason::Cancelled);
  EXPECT_TRUE(o.ids.empty());
  // The engine goes on serving, then shuts down with the job still blocked until released.
  EXPECT_EQ(collect(*e->submit({{11, 12, 13}, greedy(4)})).ids.size(), 4u);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    slow->release();
  });
  e.reset();
  releaser.join();
  EXPECT_TRUE(slow->accepted.empty());
}

// Masks computed on the pool, for several constrained requests at once (three workers racing), are those of
// each request's current state: every greedy token is the best of the logits over the tokens its
// constraint allowed at that position, checked from the logits the engine sampled from (a stale mask —
// the previous position's — would have left the best allowed token at -inf). Seeded sampling gives the
// tokens the synchronous allowed_token_ids narrowing gives for the same set.
TEST(Engine, PooledMasksAreThoseOfTheCurrentState) {
  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mutex mu;
  std::map<std::pair<uint64_t, int32_t>, std::vector<float>> logits;
  EngineOptions o{.max_batch_size = 8, .max_num_tokens = 64, .mask_threads = 3};
  o.logits_hook = [&](uint64_t id, int32_t pos, std::span<const float> row) {
    std::lock_guard lock(mu);
    logits[{id, pos}] = std::vector<float>(row.begin(), row.end());
  };
  auto e = make_engine("kimi_linear_tiny_a", o);
  const int32_t vocab = e->model().config().vocab_size;
  const std::vector<int32_t> prompt = {11, 12, 13, 14};
  constexpr int kRequests = 6, kTokens = 12;
  std::vector<std::shared_ptr<ScriptedConstraint>> constraints;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int r = 0; r < kRequests; ++r) {
    auto c = std::make_shared<ScriptedConstraint>();
    c->allowed = [=](size_t k) {  // 5 tokens per position, different at every position
      std::mt19937 rng(seed * 7919u + uint32_t(r) * 131u + uint32_t(k));
      std::vector<int32_t> ids;
      for (int i = 0; i < 5; ++i) ids.push_back(int32_t(rng() % uint32_t(vocab)));
      return ids;
    };
    constraints.push_back(c);
    streams.push_back(*e->submit({prompt, greedy(kTokens), -1, c}));
  }
  for (int r = 0; r < kRequests; ++r) {
    const Outcome out = collect(streams[size_t(r)]);
    ASSERT_EQ(out.ids.size(), size_t(kTokens));
    EXPECT_EQ(constraints[size_t(r)]->accepted, out.ids);
    for (size_t k = 0; k < out.ids.size(); ++k) {
      std::vector<float> row;
      {
        std::lock_guard lock(mu);  // other requests' steps may still be adding rows
        row = logits.at({streams[size_t(r)]->id(), int32_t(prompt.size() + k) - 1});
      }
      const std::vector<int32_t> allowed = constraints[size_t(r)]->allowed(k);
      const int32_t best = *std::max_element(allowed.begin(), allowed.end(), [&](int32_t a, int32_t b) {
        return row[size_t(a)] < row[size_t(b)] || (row[size_t(a)] == row[size_t(b)] && a > b);
      });
      EXPECT_EQ(out.ids[k], best) << "request " << r << " position " << k;
    }
  }
  // Seeded sampling at temperature 1 over a fixed set: the pooled mask and allowed_token_ids agree.
  std::vector<std::shared_ptr<RequestStream>> masked, narrowed;
  for (int r = 0; r < kRequests; ++r) {
    SamplingParams p = greedy(kTokens);
    p.temperature = 1.0f;
    p.seed = seed + uint64_t(r);
    std::mt19937 rng(seed + uint32_t(r));
    std::vector<int32_t> set;
    for (int i = 0; i < 40; ++i) set.push_back(int32_t(rng() % uint32_t(vocab)));
    auto c = std::make_shared<ScriptedConstraint>();
    c->allowed = [set](size_t) { return set; };
    masked.push_back(*e->submit({prompt, p, -1, c}));
    p.allowed_token_ids = set;
    narrowed.push_back(*e->submit({prompt, p}));
  }
  for (int r = 0; r < kRequests; ++r)
    EXPECT_EQ(collect(masked[size_t(r)]).ids, collect(narrowed[size_t(r)]).ids) << "request " << r;
}

// A constraint that bans `banned` for the first `n` generated tokens: the mask min_tokens must apply.
struct BanFirst : text::constraint::TokenConstraint {
  std::vector<int32_t> banned;
  size_t n = 0, seen = 0;
  void allowed_tokens(std::span<uint32_t> mask) override {
    std::fill(mask.begin(), mask.end(), ~0u);
    if (seen < n)
      for (int32_t t : banned) mask[size_t(t) / 32] &= ~(1u << (t % 32));
  }
  void accept(int32_t) override { ++seen; }
};

// vLLM: before min_tokens tokens, the stop ids (and EOS unless ignore_eos) cannot be sampled at all — they
// used to be sampled, kept in the output and fed back to the model. The greedy output equals a run whose
// constraint bans those ids for min_tokens tokens, and the stop id still ends the request afterwards.
TEST(Engine, MinTokensMasksStopIds) {
  auto e = make_engine("kimi_linear_tiny_a", EngineOptions{.max_batch_size = 4, .max_num_tokens = 64});
  testing::Reference ref(testing::data_dir() / "kimi_linear_tiny_a");
  const auto prompt = ref.ints("prompt_2"), want = ref.ints("greedy_2");
  const int32_t eos = e->model().config().eos_token_ids.at(0);
  SamplingParams p = greedy(12);
  p.stop_token_ids = {want[1]};
  p.min_tokens = 4;
  p.ignore_eos = false;
  const Outcome o = collect(*e->submit({prompt, p}));
  ASSERT_GE(o.ids.size(), 5u);
  EXPECT_EQ(o.ids[0], want[0]);
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_NE(o.ids[k], want[1]) << k;
    EXPECT_NE(o.ids[k], eos) << k;
  }
  auto ban = std::make_shared<BanFirst>();
  ban->banned = {want[1], eos};
  ban->n = 4;
  SamplingParams q = p;
  q.min_tokens = 0;
  const Outcome c = collect(*e->submit({prompt, q, -1, ban}));
  EXPECT_EQ(o.ids, c.ids) << "min_tokens masks exactly what the banning constraint does";
  EXPECT_EQ(o.reason, c.reason);
  if (o.reason == FinishReason::Stop) {
    EXPECT_TRUE(o.ids.back() == want[1] || o.ids.back() == eos);
  }
}

// allowed_token_ids: greedy over the allowed ids only (the same tokens a constraint allowing exactly them
// gives), alone or narrowing a grammar's set; ids outside the vocabulary are refused naming the parameter.
TEST(Engine, AllowedTokenIdsRestrictSampling) {
  auto e = make_engine("kimi_linear_tiny_a", EngineOptions{.max_batch_size = 4, .max_num_tokens = 64});
  const std::vector<int32_t> prompt = {11, 12, 13, 14}, allowed = {5, 77, 300, 411};
  SamplingParams p = greedy(10);
  p.allowed_token_ids = allowed;
  p.logprobs = 2;
  auto only = std::make_shared<ScriptedConstraint>();
  only->allowed = [&](size_t) { return allowed; };
  const Outcome o = collect(*e->submit({prompt, p}));
  const Outcome c = collect(*e->submit({prompt, greedy(10), -1, only}));
  ASSERT_EQ(o.ids.size(), 10u);
  EXPECT_EQ(o.ids, c.ids);
  for (int32_t id : o.ids) EXPECT_NE(std::find(allowed.begin(), allowed.end(), id), allowed.end()) << id;
  auto two = std::make_shared<ScriptedConstraint>();  // a grammar allowing 77 or 300, narrowed to 300
  two->allowed = [](size_t) { return std::vector<int32_t>{77, 300}; };
  SamplingParams narrow = greedy(3);
  narrow.allowed_token_ids = {300, 5};
  EXPECT_EQ(collect(*e->submit({prompt, narrow, -1, two})).ids, std::vector<int32_t>(3, 300));
  p.allowed_token_ids = {1, 512};
  auto bad = e->submit({prompt, p});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("allowed_token_ids"), std::string::npos) << bad.status().message();
}

// A row whose logits come out NaN (a broken forward, injected with EngineOptions::poison_logits) ends its own
// request with an error after the tokens it had, constrained or not (the mask must not make a NaN row look
// valid); the other requests of the same steps stream what they stream alone, and the engine serves on.
TEST(Engine, NonFiniteLogitsEndOnlyThatRequestWithAnError) {
  const std::vector<int32_t> prompt = {11, 12, 13, 14}, other = {7, 8, 9};
  auto plain = make_engine("kimi_linear_tiny_a", EngineOptions{.max_batch_size = 1, .max_num_tokens = 64});
  const auto alone = collect(*plain->submit({prompt, greedy(10)})).ids;
  const auto other_alone = collect(*plain->submit({other, greedy(10)})).ids;
  ASSERT_EQ(alone.size(), 10u);

  EngineOptions o{.max_batch_size = 4, .max_num_tokens = 64};
  // Ids count from 1 in submit order: request 2 breaks at its 4th token, request 3 (constrained) at its 1st.
  o.poison_logits = [](uint64_t id, int32_t n_generated) {
    return (id == 2 && n_generated == 3) || (id == 3 && n_generated == 0);
  };
  auto e = make_engine("kimi_linear_tiny_a", o);
  auto forced = std::make_shared<ScriptedConstraint>();
  forced->allowed = [](size_t k) { return std::vector<int32_t>{int32_t(100 + 7 * k)}; };
  auto s1 = *e->submit({other, greedy(10)});
  auto s2 = *e->submit({prompt, greedy(10)});
  auto s3 = *e->submit({prompt, greedy(10), -1, forced});
  ASSERT_EQ(s2->id(), 2u);
  const auto errored = [](const std::shared_ptr<RequestStream>& s, std::vector<int32_t>* ids) {
    StreamEvent ev;
    while (s->next(&ev, std::chrono::seconds(60))) {
      ids->insert(ids->end(), ev.token_ids.begin(), ev.token_ids.end());
      if (ev.finish) return *ev.finish == FinishReason::Error ? ev.error : Status{};
    }
    return internal_error("timed out");
  };
  std::vector<int32_t> ids2, ids3;
  const Status st2 = errored(s2, &ids2), st3 = errored(s3, &ids3);
  const Outcome o1 = collect(s1);
  EXPECT_NE(st2.message().find("non-finite logits"), std::string::npos) << st2.to_string();
  EXPECT_NE(st3.message().find("non-finite logits"), std::string::npos) << st3.to_string();
  EXPECT_EQ(ids2, std::vector<int32_t>(alone.begin(), alone.begin() + 3));
  EXPECT_TRUE(ids3.empty());
  EXPECT_TRUE(forced->accepted.empty());  // nothing sampled through the mask
  EXPECT_EQ(o1.ids, other_alone);
  EXPECT_EQ(o1.reason, FinishReason::Length);
  EXPECT_EQ(collect(*e->submit({prompt, greedy(10)})).ids, alone);
  const EngineStats st = e->stats();
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.state_slots_used, 0);
}

}  // namespace
}  // namespace rill::engine
