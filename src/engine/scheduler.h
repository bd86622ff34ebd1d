// Scheduler: which sequences run in the next step and with how many tokens (style.md §7.3, nano-vllm's
// shape). No threads, no device code, no I/O: unit-tested on the CPU against small caches.
//   schedule():    decode tokens first (one per running sequence), then prefill chunks from running and then
//                  waiting sequences under --max-num-tokens and --max-batch-size; a request is admitted only
//                  when its first chunk's blocks and a state slot can be had, starting after its longest
//                  cached prefix (prefix caching); when blocks run out for a running sequence, unreferenced
//                  cached blocks are evicted, then the newest running sequence is preempted (recomputed
//                  later). A sequence that would sample while its constraint's mask is still being
//                  computed (Sequence::can_sample) sits out the step: not preempted, caches untouched.
//   postprocess(): advances counters, commits the step to the caches (prefix caching), appends sampled
//                  tokens and applies the token-level stop conditions, one token at a time.
// Speculative decoding (a drafter and SchedulerLimits::num_speculative_tokens > 0): a speculating sequence's
// decode token is followed by up to k drafts, with the budget the decode tokens leave; its state slot is
// checkpointed before the step. postprocess accepts drafts (spec/acceptance.h); when a draft is rejected
// the slot is restored from the checkpoint, blocks past the committed tokens are freed, and the next step
// feeds the committed tokens again (then drafts on). With replay records instead (the caches'
// has_records(), kda_rollback "records") the step writes records and postprocess commits the accepted tokens
// by folding theirs in (CacheManager::fold_records): no checkpoint, no re-feed. Drafts never enter Sequence::tokens, the prefix index or
// a snapshot: only committed tokens do. Every sequence that leaves (finished, cancelled, failed) gives back
// its caches exactly once; a release the caches refuse (an id released twice) finishes that request with an
// Internal error.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cache/cache_manager.h"
#include "engine/sequence.h"
#include "engine/spec/acceptance.h"
#include "engine/spec/drafter.h"
#include "engine/spec/step_costs.h"
#include "engine/stop_checker.h"
#include "model/step_batch.h"

namespace rill::engine {

// One sequence's part of a step. `step` is what the model runs for it (start_pos, n_new, state slot, block
// table, logits rows, in-step KDA snapshots), filled when the sequence is scheduled; `token_ids` are the ids it
// feeds (its own, then its drafts). The rest is the engine's own.
struct ScheduledSeq {
  Sequence* seq = nullptr;
  model::SequenceStep step;
  std::vector<int32_t> token_ids;  // step.n_new ids: seq->tokens from step.start_pos, then the drafts
  bool samples = false;  // this chunk reaches the end of the sequence: sample a token from its logits
  // Speculative decoding: draft tokens fed after the sequence's own (the last n_drafts of token_ids); logits
  // come from its last 1 + n_drafts positions.
  int n_drafts = 0;
  std::span<const int32_t> drafts() const {
    return std::span<const int32_t>(token_ids).last(size_t(n_drafts));
  }
  int n_logit_rows() const { return step.n_logit_rows(); }
};

struct StepPlan {
  std::vector<ScheduledSeq> seqs;
  bool empty() const { return seqs.empty(); }
  // The step as the executor takes it: every sequence's ids, one after another, and its SequenceStep.
  model::StepBatch batch() const;
};

struct SchedulerLimits {
  int max_batch_size = 64;
  int max_num_tokens = 2048;
  int max_model_len = 4096;
  bool chunked_prefill = true;
  int num_speculative_tokens = 0;  // drafts per sequence and step (0: no speculation)
  spec::BreakEvenRule break_even;  // when a sequence stops speculating
};

// Speculative decoding's counters (vLLM's spec_decode metrics): verify steps with drafts, drafts fed,
// drafts accepted, and how many steps emitted each number of tokens (acceptance_lengths[n - 1]: n tokens).
struct SpecDecodeStats {
  uint64_t n_drafts = 0, n_draft_tokens = 0, n_accepted_tokens = 0;
  uint64_t n_stopped = 0;  // sequences that stopped speculating below break-even
  std::vector<uint64_t> acceptance_lengths;
};

// What a step emitted for one sequence, one token at a time (Scheduler::postprocess's sink).
struct EmittedToken {
  int32_t id = 0;
  int row = 0;           // the step's logits row it was sampled from
  int32_t position = 0;  // the position whose logits those are
};

class Scheduler {
 public:
  // `drafter` (may be null: no speculation) must outlive the scheduler; it is told every request that ends
  // (Drafter::observe_finished).
  Scheduler(cache::CacheManager& caches, SchedulerLimits limits, std::vector<int32_t> eos_ids,
            spec::Drafter* drafter = nullptr)
      : caches_(caches), limits_(limits), eos_ids_(std::move(eos_ids)), drafter_(drafter),
        step_costs_(limits.max_batch_size) {
    spec_.acceptance_lengths.assign(size_t(std::max(limits_.num_speculative_tokens, 0) + 1), 0);
  }

  void add(std::unique_ptr<Sequence> seq) { waiting_.push_back(std::move(seq)); }
  StepPlan schedule();
  // Called for each token a step emits, in order, after its token-level stop checks (the sequence may have
  // finished on it); returns the stop string its text completed, if any, which ends the sequence there.
  using TokenSink = std::function<std::optional<std::string>(Sequence& seq, const EmittedToken& token)>;
  // Applies a step's sampled ids (one per logits row: ScheduledSeq::n_logit_rows() per entry, in plan
  // order). Sequences that finish move to the finished list (`take_finished`); tokens after the one that
  // ends a sequence are dropped. `nonfinite` (empty, or one per row): rows whose logits held a NaN or
  // infinity; a sequence with one finishes with an Error and nothing of its step is committed or emitted.
  void postprocess(const StepPlan& plan, const std::vector<int32_t>& sampled, const TokenSink& sink = {},
                   std::span<const uint8_t> nonfinite = {});
  // The wall time of a step the executor replayed from a graph (runner::StepOutput::replayed), before its
  // postprocess: what decode and verify steps cost, which sets the break-even (spec/step_costs.h).
  void record_replayed_step(const StepPlan& plan, double seconds);
  const spec::StepCosts& step_costs() const { return step_costs_; }
  // Ends a sequence now (cancel, stop string, error) and frees its caches. Unknown ids: no-op.
  void finish(uint64_t id, FinishReason reason, std::string detail = {});
  // Ends every running and waiting sequence (shutdown without drain).
  void finish_all(FinishReason reason);
  // Finished sequences with their reasons, removed from the scheduler. `detail`: the stop string or id, or
  // the error of a FinishReason::Error.
  struct Finished {
    std::unique_ptr<Sequence> seq;
    FinishReason reason;
    std::string detail;
  };
  std::vector<Finished> take_finished();

  int n_running() const { return int(running_.size()); }
  int n_waiting() const { return int(waiting_.size()); }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  // Whether a running or waiting sequence's next-token mask is still being computed (it would sit out a step).
  bool masks_pending() const;
  uint64_t preemptions() const { return preemptions_; }
  // Prompt tokens of admitted requests, and how many of them came from the prefix cache.
  uint64_t prefix_queries() const { return prefix_queries_; }
  uint64_t prefix_hits() const { return prefix_hits_; }
  // Of those, the tokens of blocks brought back from the host tier, and those read from the disk tier into it
  // for the admission (not counted as host hits).
  uint64_t prefix_hits_host() const { return prefix_hits_host_; }
  uint64_t prefix_hits_disk() const { return prefix_hits_disk_; }
  // The first `n` waiting requests, in admission order (the disk tier reads their prefixes in first).
  std::vector<Sequence*> waiting_head(int n) const;
  const SpecDecodeStats& spec_decode() const { return spec_; }
  // Speculative decoding of a constrained sequence: the drafts its next step may feed, proposed now (its
  // tokens are final until that step) so that its mask computation can cut them at the first the grammar
  // rejects and compute the masks of their positions off the engine thread (ConstraintMask::set_drafts).
  std::vector<int32_t> propose_for_mask(const Sequence& s) const;
  Sequence* find(uint64_t id);

 private:
  bool preempt_newest(const std::function<bool(const Sequence*)>& may_preempt);
  int chunk_size(const Sequence& s, int from, int budget) const;
  int speculation_end(const Sequence& s) const;
  // How many drafts `s` may bring after its `n_own` tokens in this step, within `budget` tokens (0: none).
  int draft_limit(const Sequence& s, int n_own, int budget) const;
  // Drafts for the step's sampling sequences, asked of the drafter in one batch; each sequence's are trimmed
  // to the blocks it can get and its slot is checkpointed. Returns the budget left.
  int plan_drafts(std::vector<ScheduledSeq>& seqs, int budget);
  // Frees `seq`'s caches and moves it to the finished list.
  void retire(std::unique_ptr<Sequence> seq, FinishReason reason, std::string detail);

  cache::CacheManager& caches_;
  SchedulerLimits limits_;
  std::vector<int32_t> eos_ids_;
  spec::Drafter* drafter_ = nullptr;
  SpecDecodeStats spec_;
  spec::StepCosts step_costs_;
  std::set<std::pair<int, int>> ratios_logged_;  // (batch class, q) whose measured break-even was logged
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order (newest last)
  std::vector<Finished> finished_;
  uint64_t preemptions_ = 0, prefix_queries_ = 0, prefix_hits_ = 0, prefix_hits_host_ = 0, prefix_hits_disk_ = 0;
};

}  // namespace rill::engine
