// Scheduler against small real caches (CPU): decode first, token budget, FIFO admission only when a slot and
// blocks are free, preemption of the newest sequence when blocks run out, everything released exactly once.
#include <gtest/gtest.h>

#include "engine/scheduler.h"
#include "engine/spec/drafter.h"
#include "model/fixture.h"

namespace rill::engine {
namespace {

struct Fixture {
  std::unique_ptr<backend::Backend> be = backend::make_cpu_backend();
  model::ModelConfig cfg = *model::ModelConfig::load(testing::data_dir() / "kimi_linear_tiny_a");
  std::unique_ptr<cache::CacheManager> caches;
  Fixture(int slots, int blocks, int snapshot_interval = 0, bool checkpoints = false) {
    cache::MemoryPlan p;
    p.n_slots = slots;
    p.n_blocks = blocks;
    p.n_checkpoints = checkpoints ? slots : 0;
    cache::PrefixCacheOptions prefix;
    prefix.enabled = snapshot_interval > 0;
    prefix.snapshot_interval = snapshot_interval;
    p.n_snapshots = prefix.enabled ? 8 : 0;
    caches = std::make_unique<cache::CacheManager>(*cache::CacheManager::create(p, prefix));
  }
};

std::unique_ptr<Sequence> seq(uint64_t id, int prompt, int max_new = 100) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->tokens.assign(static_cast<size_t>(prompt), 1);
  s->n_prompt = prompt;
  s->max_new_tokens = max_new;
  s->params.max_tokens = max_new;
  return s;
}

std::vector<int32_t> ones(const StepPlan& p) {
  int n = 0;
  for (const auto& s : p.seqs) n += s.samples;
  return std::vector<int32_t>(static_cast<size_t>(n), 3);
}

TEST(Scheduler, DecodeFirstThenPrefillUnderTheBudget) {
  Fixture f(4, 64);
  Scheduler s(*f.caches, {4, 50, 4096, true}, {2});
  s.add(seq(1, 30));
  StepPlan p = s.schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].step.n_new, 30);
  EXPECT_TRUE(p.seqs[0].samples);
  s.postprocess(p, ones(p));
  s.add(seq(2, 100));
  p = s.schedule();  // seq 1 decodes (1 token), seq 2 gets the remaining 49 of the budget
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].seq->id, 1u);
  EXPECT_EQ(p.seqs[0].step.n_new, 1);
  EXPECT_EQ(p.seqs[1].step.n_new, 49);
  EXPECT_FALSE(p.seqs[1].samples);
  s.postprocess(p, ones(p));
  p = s.schedule();
  EXPECT_EQ(p.seqs[1].step.n_new, 49);
  EXPECT_FALSE(p.seqs[1].samples);
  s.postprocess(p, ones(p));
  p = s.schedule();
  EXPECT_EQ(p.seqs[1].step.n_new, 2);  // 100 = 49 + 49 + 2
  EXPECT_TRUE(p.seqs[1].samples);
}

TEST(Scheduler, AdmitsOnlyWithAFreeSlotAndFinishesReleaseEverything) {
  Fixture f(2, 64);
  Scheduler s(*f.caches, {8, 1000, 4096, true}, {2});
  for (uint64_t i = 1; i <= 3; ++i) s.add(seq(i, 10, 2));
  StepPlan p = s.schedule();
  EXPECT_EQ(p.seqs.size(), 2u);  // two slots
  EXPECT_EQ(s.n_waiting(), 1);
  s.postprocess(p, ones(p));
  p = s.schedule();
  s.postprocess(p, ones(p));  // max_new 2 reached: both finish
  EXPECT_EQ(s.take_finished().size(), 2u);
  p = s.schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].seq->id, 3u);
  s.finish(3, FinishReason::Cancelled);
  EXPECT_EQ(s.take_finished().size(), 1u);
  EXPECT_EQ(f.caches->blocks().used_count(), 0);
  EXPECT_EQ(f.caches->slots().used_count(), 0);
}

TEST(Scheduler, PreemptsTheNewestWhenBlocksRunOut) {
  Fixture f(4, 4);  // 4 blocks of 64 tokens
  Scheduler s(*f.caches, {4, 1000, 4096, true}, {2});
  s.add(seq(1, 64));
  s.add(seq(2, 64));
  s.add(seq(3, 64));
  s.add(seq(4, 64));
  StepPlan p = s.schedule();
  EXPECT_EQ(p.seqs.size(), 4u);  // all four blocks in use
  s.postprocess(p, ones(p));
  p = s.schedule();  // each needs a second block for position 64: the newest ones are preempted
  EXPECT_GE(s.preemptions(), 1u);
  EXPECT_GE(s.n_waiting(), 1);
  for (const auto& q : p.seqs) EXPECT_LE(q.seq->cache.blocks.size(), 2u);
  EXPECT_LE(f.caches->blocks().used_count(), 4);
  s.finish_all(FinishReason::Cancelled);
  EXPECT_EQ(s.take_finished().size(), 4u);
  EXPECT_EQ(f.caches->blocks().used_count(), 0);
  EXPECT_EQ(f.caches->slots().used_count(), 0);
}

// Gives the KDA slot of sequence `id` back behind the scheduler's back, so the scheduler's own release of it
// is a double release.
void release_slot_twice(cache::CacheManager& caches, Scheduler& s, uint64_t id) {
  cache::SequenceCache stale;
  stale.slot = s.find(id)->cache.slot;
  ASSERT_TRUE(caches.release(&stale).ok());
}

// A release the caches refuse (a cache id freed twice) is a bug that is reported, not dropped: the request
// finishes with the Internal error instead of its own reason, whichever way it leaves — finish, finish_all,
// or preemption (where it is not requeued) — and the rest of its caches still go back.
TEST(Scheduler, ADoubleReleaseIsReportedAsAnInternalError) {
  auto expect_error = [](const Scheduler::Finished& d, uint64_t id) {
    EXPECT_EQ(d.seq->id, id);
    EXPECT_EQ(d.reason, FinishReason::Error) << "request " << id;
    EXPECT_NE(d.detail.find("KDA state slots: id"), std::string::npos) << d.detail;
    EXPECT_NE(d.detail.find("released but not allocated"), std::string::npos) << d.detail;
  };
  {
    Fixture f(2, 8);
    Scheduler s(*f.caches, {2, 1000, 4096, true}, {2});
    s.add(seq(1, 10));
    s.add(seq(2, 10));
    ASSERT_EQ(s.schedule().seqs.size(), 2u);
    release_slot_twice(*f.caches, s, 1);
    release_slot_twice(*f.caches, s, 2);
    s.finish(1, FinishReason::Cancelled);
    s.finish_all(FinishReason::Cancelled);
    const auto done = s.take_finished();
    ASSERT_EQ(done.size(), 2u);
    expect_error(done[0], 1);
    expect_error(done[1], 2);
    EXPECT_EQ(f.caches->blocks().used_count(), 0);
    EXPECT_EQ(f.caches->slots().used_count(), 0);
  }
  {
    Fixture f(4, 4);  // four one-block sequences that all grow into a second block: the newest are preempted
    Scheduler s(*f.caches, {4, 1000, 4096, true}, {2});
    for (uint64_t id = 1; id <= 4; ++id) s.add(seq(id, 64));
    StepPlan p = s.schedule();
    ASSERT_EQ(p.seqs.size(), 4u);
    s.postprocess(p, ones(p));
    release_slot_twice(*f.caches, s, 4);
    p = s.schedule();
    const auto done = s.take_finished();
    ASSERT_EQ(done.size(), 1u);
    expect_error(done[0], 4);
    EXPECT_EQ(s.find(4), nullptr);  // not waiting to be recomputed
    s.finish_all(FinishReason::Cancelled);
    EXPECT_EQ(s.take_finished().size(), 3u);
    EXPECT_EQ(f.caches->blocks().used_count(), 0);
    EXPECT_EQ(f.caches->slots().used_count(), 0);
  }
}

// Prefix caching: prefill chunks end at snapshot positions (multiples of the interval, the prompt's last full
// block) whatever the budget, and an identical prompt is admitted past its cached prefix.
TEST(Scheduler, PrefixCachingCutsChunksAtSnapshotsAndResumesFromThem) {
  Fixture f(2, 64, 128);
  Scheduler s(*f.caches, {2, 100, 4096, true}, {2});
  auto run_prompt = [&](uint64_t id) {
    auto q = seq(id, 300, 1);
    for (size_t i = 0; i < q->tokens.size(); ++i) q->tokens[i] = int32_t(i % 500);
    s.add(std::move(q));
    std::vector<int> starts, sizes;
    for (StepPlan p = s.schedule(); !p.empty(); p = s.schedule()) {
      starts.push_back(p.seqs[0].seq->n_computed);
      sizes.push_back(p.seqs[0].step.n_new);
      s.postprocess(p, ones(p));
    }
    EXPECT_EQ(s.take_finished().size(), 1u);
    return std::pair{starts, sizes};
  };
  const auto [starts, sizes] = run_prompt(1);
  EXPECT_EQ(starts,
            (std::vector<int>{0, 100, 128, 228, 256}));  // budget 100; stops at 128, 256 (= last block)
  EXPECT_EQ(sizes, (std::vector<int>{100, 28, 100, 28, 44}));
  const auto [starts2, sizes2] = run_prompt(2);
  EXPECT_EQ(starts2, (std::vector<int>{256}));  // the same prompt: from the snapshot at its last full block
  EXPECT_EQ(sizes2, (std::vector<int>{44}));
  EXPECT_EQ(s.prefix_queries(), 600u);
  EXPECT_EQ(s.prefix_hits(), 256u);
  EXPECT_EQ(f.caches->blocks_in_use(), 0);
  EXPECT_EQ(f.caches->slots().used_count(), 0);
}

// Proposes `drafts` after any context.
struct FixedDrafter : spec::Drafter {
  std::vector<int32_t> drafts;
  std::vector<int32_t> propose(std::span<const int32_t>, int max_tokens) const override {
    return {drafts.begin(), drafts.begin() + std::min<ptrdiff_t>(max_tokens, ptrdiff_t(drafts.size()))};
  }
};

// The model's description of each sequence's part of the step, as the scheduler fills it: its next tokens (then
// its drafts), its position, slot and blocks after the step's growth, and the logits rows it samples from.
TEST(Scheduler, TheStepDescribesEverySequenceAsScheduled) {
  Fixture f(4, 64, 0, /*checkpoints=*/true);
  FixedDrafter drafter;
  drafter.drafts = {7, 8, 9};
  SchedulerLimits lim{4, 200, 4096, true, /*num_speculative_tokens=*/2};
  lim.break_even.min_steps = 1 << 20;  // keep speculating whatever is accepted
  Scheduler s(*f.caches, lim, {2}, &drafter);
  auto decoding = seq(1, 63);
  for (size_t i = 0; i < decoding->tokens.size(); ++i) decoding->tokens[i] = int32_t(100 + i);
  decoding->speculates = true;
  s.add(std::move(decoding));
  StepPlan p = s.schedule();  // its whole prompt
  s.postprocess(p, ones(p));
  auto prefilling = seq(2, 300);
  for (size_t i = 0; i < prefilling->tokens.size(); ++i) prefilling->tokens[i] = int32_t(1000 + i);
  s.add(std::move(prefilling));
  p = s.schedule();  // sequence 1: its sampled token and two drafts; sequence 2: a prefill chunk
  ASSERT_EQ(p.seqs.size(), 2u);
  const model::StepBatch b = p.batch();
  ASSERT_EQ(b.seqs.size(), 2u);

  const ScheduledSeq& verify = p.seqs[0];
  const Sequence& one = *verify.seq;
  EXPECT_EQ(one.id, 1u);
  EXPECT_EQ(verify.token_ids, (std::vector<int32_t>{3, 7, 8}));  // sampled (ones()), then the drafts
  EXPECT_EQ(std::vector<int32_t>(verify.drafts().begin(), verify.drafts().end()), (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(b.seqs[0].start_pos, 63);
  EXPECT_EQ(b.seqs[0].n_new, 3);
  EXPECT_EQ(b.seqs[0].state_slot, one.cache.slot);
  EXPECT_EQ(b.seqs[0].block_table, one.cache.blocks);  // grown to position 66: two blocks
  EXPECT_EQ(b.seqs[0].block_table.size(), 2u);
  EXPECT_EQ(b.seqs[0].logits, model::LogitsNeeded::LastN);
  EXPECT_EQ(b.seqs[0].n_logit_rows(), 3);

  const Sequence& two = *p.seqs[1].seq;
  EXPECT_EQ(two.id, 2u);
  const int n = b.seqs[1].n_new;
  EXPECT_EQ(n, 200 - 3);  // the rest of the budget
  EXPECT_EQ(b.seqs[1].start_pos, 0);
  EXPECT_EQ(b.seqs[1].state_slot, two.cache.slot);
  EXPECT_EQ(b.seqs[1].block_table, two.cache.blocks);
  EXPECT_EQ(b.seqs[1].logits, model::LogitsNeeded::None);
  EXPECT_FALSE(p.seqs[1].samples);
  EXPECT_TRUE(p.seqs[1].drafts().empty());

  std::vector<int32_t> ids = verify.token_ids;
  ids.insert(ids.end(), two.tokens.begin(), two.tokens.begin() + n);
  EXPECT_EQ(b.token_ids, ids);
  EXPECT_EQ(b.n_logit_rows(), 3);
  s.finish_all(FinishReason::Cancelled);
}

// A speculating sequence that gets one of its two drafts accepted every step stops once the measured verify
// steps cost more than two decode steps (break-even r - 1 > 1), and goes on where they cost less, where
// nothing is measured (the static 0.5) or where the rule is told not to use measurements.
TEST(Scheduler, MeasuredStepCostsSetTheBreakEven) {
  struct Case {
    const char* what;
    double verify_seconds;  // a decode step takes 1.0; 0: none measured
    bool measured;
    bool stops;
  };
  for (const Case& c :
       {Case{"r = 3", 3.0, true, true}, Case{"r = 1.5", 1.5, true, false},
        Case{"nothing measured", 0, true, false}, Case{"r = 3, measured off", 3.0, false, false}}) {
    SCOPED_TRACE(c.what);
    Fixture f(4, 64, 0, /*checkpoints=*/true);
    FixedDrafter drafter;
    drafter.drafts = {7, 8};
    SchedulerLimits lim{4, 200, 4096, true, /*num_speculative_tokens=*/2};
    lim.break_even.min_steps = 4;
    lim.break_even.measured = c.measured;
    Scheduler s(*f.caches, lim, {2}, &drafter);
    // What graph replays of one sequence measured: decode steps (1 token) and verify steps (1 + 2 drafts).
    if (c.verify_seconds > 0) {
      StepPlan decode, verify;
      decode.seqs.push_back({.step = {.n_new = 1}, .samples = true});
      verify.seqs.push_back({.step = {.n_new = 3}, .samples = true, .n_drafts = 2});
      for (int i = 0; i < spec::StepCosts::kMinSamples; ++i) {
        s.record_replayed_step(decode, 1.0);
        s.record_replayed_step(verify, c.verify_seconds);
      }
      ASSERT_TRUE(s.step_costs().verify_ratio(1, 3));
    }
    auto one = seq(1, 63);
    one->speculates = true;
    s.add(std::move(one));
    StepPlan p = s.schedule();  // its prompt
    s.postprocess(p, ones(p));
    // Verify steps accept draft 7 and reject 8 (9 sampled there); a rejection's rollback re-feeds the
    // accepted token in the next step, which brings no drafts.
    int verify_steps = 0;
    for (int step = 0; step < 4 * lim.break_even.min_steps && verify_steps < lim.break_even.min_steps;
         ++step) {
      p = s.schedule();
      ASSERT_EQ(p.seqs.size(), 1u);
      if (p.seqs[0].n_drafts == 0) {
        s.postprocess(p, std::vector<int32_t>(size_t(p.seqs[0].n_logit_rows()), 3));
        continue;
      }
      ASSERT_EQ(p.seqs[0].n_drafts, 2) << "step " << step;
      s.postprocess(p, {7, 9, 9});
      ++verify_steps;
    }
    ASSERT_EQ(verify_steps, lim.break_even.min_steps);
    EXPECT_EQ(s.spec_decode().n_stopped, c.stops ? 1u : 0u);
    // Speculating sequences draft at least every other step; one that stopped never again.
    int drafted = 0;
    for (int step = 0; step < 2; ++step) {
      p = s.schedule();
      ASSERT_EQ(p.seqs.size(), 1u);
      drafted += p.seqs[0].n_drafts > 0;
      s.postprocess(p, std::vector<int32_t>(size_t(p.seqs[0].n_logit_rows()), 3));
    }
    EXPECT_EQ(drafted > 0, !c.stops);
    s.finish_all(FinishReason::Cancelled);
  }
}

}  // namespace
}  // namespace rill::engine
