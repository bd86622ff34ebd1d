#include "engine/scheduler.h"

#include <algorithm>
#include <climits>

#include "core/log.h"
#include "engine/spec/acceptance.h"

namespace rill::engine {

model::StepBatch StepPlan::batch() const {
  model::StepBatch b;
  for (const ScheduledSeq& s : seqs) {
    b.token_ids.insert(b.token_ids.end(), s.token_ids.begin(), s.token_ids.end());
    b.seqs.push_back(s.step);
  }
  return b;
}

namespace {

// `s`'s next `n` tokens from n_computed as the model runs them, described once, when they are scheduled (its
// caches are final for the step by then: blocks grown or admitted, slot held).
ScheduledSeq scheduled(Sequence* s, int n, std::vector<model::KdaSnapshotRequest> snapshots = {}) {
  ScheduledSeq p;
  p.seq = s;
  p.samples = s->n_computed + n == int(s->tokens.size());
  model::SequenceStep& q = p.step;
  q.start_pos = s->n_computed;
  q.n_new = n;
  q.state_slot = s->cache.slot;
  q.block_table = s->cache.blocks;
  q.logits = p.samples ? model::LogitsNeeded::Last : model::LogitsNeeded::None;
  q.n_logits = p.samples ? 1 : 0;
  q.kda_snapshots = std::move(snapshots);
  p.token_ids.assign(s->tokens.begin() + s->n_computed, s->tokens.begin() + s->n_computed + n);
  return p;
}

// A sampling sequence's drafts join its step (its blocks were grown for them): fed after its own tokens, with
// logits at the last of those and at every draft (the verify step).
void add_drafts(ScheduledSeq& p, std::vector<int32_t> drafts) {
  p.n_drafts = int(drafts.size());
  p.token_ids.insert(p.token_ids.end(), drafts.begin(), drafts.end());
  p.step.n_new += p.n_drafts;
  p.step.block_table = p.seq->cache.blocks;
  p.step.logits = model::LogitsNeeded::LastN;
  p.step.n_logits = 1 + p.n_drafts;
}

}  // namespace

std::vector<Sequence*> Scheduler::waiting_head(int n) const {
  std::vector<Sequence*> out;
  for (size_t i = 0; i < waiting_.size() && int(out.size()) < n; ++i) out.push_back(waiting_[i].get());
  return out;
}

Sequence* Scheduler::find(uint64_t id) {
  for (auto& s : running_)
    if (s->id == id) return s.get();
  for (auto& s : waiting_)
    if (s->id == id) return s.get();
  return nullptr;
}

// Recompute preemption: the newest running sequence not in this step gives back its caches and waits at the
// front of the queue; it will prefill all its tokens (prompt and generated) again.
bool Scheduler::masks_pending() const {
  for (const auto& s : running_)
    if (!s->can_sample()) return true;
  for (const auto& s : waiting_)
    if (!s->can_sample()) return true;
  return false;
}

bool Scheduler::preempt_newest(const std::function<bool(const Sequence*)>& may_preempt) {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (!may_preempt(it->get())) continue;
    std::unique_ptr<Sequence> s = std::move(*it);
    running_.erase(std::next(it).base());
    if (Status st = caches_.release(&s->cache); !st.ok()) {  // see retire: reported, not recomputed
      finished_.push_back({std::move(s), FinishReason::Error, st.message()});
      return true;
    }
    s->n_computed = 0;
    s->rolled_back = false;  // it recomputes everything from position 0
    s->disk_staged = false;
    s->n_preemptions++;
    ++preemptions_;
    waiting_.push_front(std::move(s));
    return true;
  }
  return false;
}

// Prefill tokens for `s` from `from` under `budget`: with prefix caching, a chunk reaches every KDA snapshot
// position (CacheManager::chunk_end).
int Scheduler::chunk_size(const Sequence& s, int from, int budget) const {
  const int n_tokens = int(s.tokens.size());
  if (!limits_.chunked_prefill) return std::min(n_tokens, from + budget) - from;
  return caches_.chunk_end(from, budget, s.n_prompt, n_tokens) - from;
}

// With prefix caching, where a speculating sequence's step must end: the next block boundary, so that a full
// acceptance (or the re-feed after a rejection) lands on it and commit() snapshots the state there, as it
// does when a step feeds one token. Without, anywhere.
int Scheduler::speculation_end(const Sequence& s) const {
  if (!caches_.prefix_caching()) return INT32_MAX;
  return (s.n_computed / caches_.block_size() + 1) * caches_.block_size();
}

// Up to k drafts, fewer where they could not all be emitted (max_tokens, the context) or do not fit the
// step's budget. None while a re-feed longer than one verify window is pending: the checkpoint is taken
// before the step, so a rejection sends the sequence back to its start, and re-fed tokens would otherwise
// pile up over consecutive rejections.
// With replay records, the step's tokens must fit the records (k + 1 of them) and fold onto a computed state.
int Scheduler::draft_limit(const Sequence& s, int n_own, int budget) const {
  const int k_max = limits_.num_speculative_tokens;
  if (!drafter_ || k_max <= 0 || !s.speculates || !caches_.can_roll_back() || n_own > k_max + 1) return 0;
  if (caches_.has_records() && s.n_computed == 0) return 0;
  const int record_room = caches_.has_records() ? caches_.record_tokens() - n_own : INT_MAX;
  const int n_tokens = int(s.tokens.size());
  return std::max(0, std::min({k_max, s.max_new_tokens - s.n_generated() - 1, limits_.max_model_len - n_tokens - 1,
                               budget, speculation_end(s) - n_tokens, record_room}));
}

// The budget is reserved for each sequence's full k before the drafter answers (a proposal may come back
// shorter), so that one batch asks for every sequence's drafts at once. A constrained sequence's drafts were
// proposed when its mask was started, and cut where its grammar rejects one; the masks of their positions
// are ready with its own (ConstraintMask::set_drafts). Drafts never preempt anyone: a proposal is trimmed to
// the blocks free now (a shorter proposal is a prefix of a longer one: Drafter::propose).
int Scheduler::plan_drafts(std::vector<ScheduledSeq>& seqs, int budget) {
  std::vector<std::pair<ScheduledSeq*, int>> asking;  // (sequence, its k)
  std::vector<spec::DraftQuery> queries;
  int reserved = 0;
  for (ScheduledSeq& p : seqs) {
    if (budget - reserved <= 0) break;
    if (!p.samples) continue;
    const int k = draft_limit(*p.seq, p.step.n_new, budget - reserved);
    if (k <= 0) continue;
    asking.emplace_back(&p, k);
    if (!p.seq->constraint) queries.push_back({p.seq->tokens, k});
    reserved += k;
  }
  if (asking.empty()) return budget;
  std::vector<std::vector<int32_t>> proposals;
  if (!queries.empty()) proposals = drafter_->propose_batch(queries);
  size_t next_proposal = 0;
  for (auto& [p, k] : asking) {
    Sequence& s = *p->seq;
    std::vector<int32_t> drafts;
    if (s.constraint) {
      const std::span<const int32_t> ready = s.constraint->drafts();
      drafts.assign(ready.begin(), ready.end());
    } else if (next_proposal < proposals.size()) {
      drafts = std::move(proposals[next_proposal++]);
    }
    const int n_tokens = int(s.tokens.size());
    if (int(drafts.size()) > k) drafts.resize(size_t(k));
    while (!drafts.empty() &&
           caches_.blocks_to_grow(s.cache, n_tokens + int(drafts.size())) > caches_.available_blocks())
      drafts.pop_back();
    if (drafts.empty() || !caches_.grow(&s.cache, n_tokens + int(drafts.size())).ok()) continue;
    // Replay records need nothing before the step: its KDA writes them instead of updating the slot.
    if (!caches_.has_records() && !caches_.save_checkpoint(&s.cache, s.n_computed).ok()) continue;
    budget -= int(drafts.size());
    add_drafts(*p, std::move(drafts));
    p->step.kda_records = caches_.has_records();
  }
  return budget;
}

std::vector<int32_t> Scheduler::propose_for_mask(const Sequence& s) const {
  const int k_max = limits_.num_speculative_tokens;
  if (!drafter_ || k_max <= 0 || !s.speculates || !caches_.can_roll_back()) return {};
  const int k = std::min({k_max, s.max_new_tokens - s.n_generated() - 1,
                          limits_.max_model_len - int(s.tokens.size()) - 1});
  if (k <= 0) return {};
  std::vector<int32_t> drafts = drafter_->propose(s.tokens, k);
  if (int(drafts.size()) > k) drafts.resize(size_t(k));
  return drafts;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int budget = limits_.max_num_tokens;
  int staging_used = 0;
  auto in_plan = [&](const Sequence* s) {
    return std::any_of(plan.seqs.begin(), plan.seqs.end(), [&](const ScheduledSeq& p) { return p.seq == s; });
  };
  // A running sequence may only take the blocks it can get; others not yet in the plan are preempted for it.
  auto make_room = [&](Sequence* s, int total_tokens) {
    while (caches_.blocks_to_grow(s->cache, total_tokens) > caches_.available_blocks())
      if (!preempt_newest([&](const Sequence* o) { return o != s && !in_plan(o); })) return false;
    return caches_.grow(&s->cache, total_tokens).ok();
  };

  // 1. Decode: one token for every running sequence whose only unprocessed token is its last sampled one, or
  // the tokens committed since its checkpoint after a rejected draft (speculative decoding).
  for (size_t i = 0; i < running_.size() && int(plan.seqs.size()) < limits_.max_batch_size && budget > 0;
       ++i) {
    Sequence* s = running_[i].get();
    int n = s->n_remaining();
    if (n != 1 && !(s->rolled_back && n <= budget)) continue;
    // A re-feed stops at the next block boundary, where a step per token would have taken its snapshot.
    n = std::min(n, speculation_end(*s) - s->n_computed);
    if (!s->can_sample()) continue;  // its mask is still being computed: a later step, caches untouched
    if (!make_room(s, s->n_computed + n)) continue;
    plan.seqs.push_back(scheduled(s, n));
    budget -= n;
  }
  // 1b. Drafts for the speculating ones, in the budget the decode tokens leave; the slot's state before them
  // goes to its checkpoint.
  budget = plan_drafts(plan.seqs, budget);
  // 2. Prefill chunks of running sequences (chunked prefill in progress, or recomputation).
  for (size_t i = 0; i < running_.size() && int(plan.seqs.size()) < limits_.max_batch_size && budget > 0;
       ++i) {
    Sequence* s = running_[i].get();
    if (s->n_remaining() <= 1 || in_plan(s)) continue;
    const int n = chunk_size(*s, s->n_computed, budget);
    if (!limits_.chunked_prefill && n < s->n_remaining()) continue;
    if (s->n_computed + n == int(s->tokens.size()) && !s->can_sample()) continue;
    if (!make_room(s, s->n_computed + n)) continue;
    plan.seqs.push_back(scheduled(s, n, caches_.plan_snapshots(s->n_computed, n, s->n_prompt, &staging_used)));
    budget -= n;
  }
  // 3. Admit waiting requests in arrival order while their first chunk fits, passing over those whose first
  // chunk would sample before their mask is ready.
  for (size_t i = 0; i < waiting_.size() && int(plan.seqs.size()) < limits_.max_batch_size && budget > 0;) {
    Sequence* s = waiting_[i].get();
    // A cached prefix (prefix caching) lets it start past position 0, from a restored KDA snapshot.
    const cache::PrefixHit hit = caches_.find_prefix(s->tokens);
    const int start = hit.n_tokens(caches_.block_size());
    const int n = chunk_size(*s, start, budget);
    if (!limits_.chunked_prefill && start + n < int(s->tokens.size())) break;
    if (start + n == int(s->tokens.size()) && !s->can_sample()) {
      ++i;
      continue;
    }
    if (!caches_.can_admit(hit, start + n)) break;
    if (!caches_.admit(&s->cache, hit, start + n).ok()) break;
    s->n_computed = start;
    if (s->n_cached < 0) {  // first admission: what usage reports as cached prompt tokens
      s->n_cached = std::min(start, s->n_prompt);
      prefix_queries_ += uint64_t(s->n_prompt);
      prefix_hits_ += uint64_t(s->n_cached);
      const int host = std::min(hit.n_host * caches_.block_size(), s->n_cached);
      const int disk = std::min(hit.n_disk * caches_.block_size(), host);
      prefix_hits_host_ += uint64_t(host - disk);
      prefix_hits_disk_ += uint64_t(disk);
    }
    running_.push_back(std::move(waiting_[i]));
    waiting_.erase(waiting_.begin() + long(i));
    plan.seqs.push_back(scheduled(s, n, caches_.plan_snapshots(s->n_computed, n, s->n_prompt, &staging_used)));
    budget -= n;
  }
  return plan;
}

void Scheduler::record_replayed_step(const StepPlan& plan, double seconds) {
  if (plan.seqs.empty()) return;
  const int n = int(plan.seqs.size()), q = plan.seqs.front().step.n_new;
  for (const ScheduledSeq& p : plan.seqs)  // a replayed step is uniform; anything else is not a cost sample
    if (!p.samples || p.step.n_new != q || p.n_drafts != q - 1) return;
  step_costs_.record(n, q, seconds);
  if (q == 1 || !limits_.break_even.measured) return;
  const std::pair<int, int> key{step_costs_.batch_class(n), q};
  const std::optional<double> r = step_costs_.verify_ratio(n, q);
  if (r && ratios_logged_.insert(key).second)
    RILL_LOG_INFO("speculation: a verify step of {} drafts at up to {} sequences costs {:.2f} decode steps "
                  "({:.3f} / {:.3f} ms): sequences below {:.2f} accepted drafts a step stop speculating",
                  q - 1, key.first, *r, *step_costs_.seconds(n, q) * 1e3, *step_costs_.seconds(n, 1) * 1e3,
                  limits_.break_even.threshold(r));
}

void Scheduler::postprocess(const StepPlan& plan, const std::vector<int32_t>& sampled, const TokenSink& sink,
                            std::span<const uint8_t> nonfinite) {
  // The verify step's measured cost in decode steps (its batch-size class, its most drafts), if known.
  int most_drafts = 0;
  for (const ScheduledSeq& p : plan.seqs) most_drafts = std::max(most_drafts, p.n_drafts);
  const std::optional<double> verify_ratio =
      most_drafts > 0 ? step_costs_.verify_ratio(int(plan.seqs.size()), 1 + most_drafts) : std::nullopt;
  size_t row = 0;
  for (const ScheduledSeq& p : plan.seqs) {
    Sequence* s = p.seq;
    const int32_t start = s->n_computed;
    spec::Acceptance acc;
    if (p.samples) {
      const size_t n_rows = size_t(p.n_logit_rows());
      if (row + n_rows > sampled.size()) {
        finish(s->id, FinishReason::Error, "internal: fewer sampled tokens than logits rows");
        continue;
      }
      if (!nonfinite.empty() &&
          std::any_of(nonfinite.begin() + ptrdiff_t(row), nonfinite.begin() + ptrdiff_t(row + n_rows),
                      [](uint8_t b) { return b != 0; })) {
        row += n_rows;
        finish(s->id, FinishReason::Error,
               fmt::format("the model produced non-finite logits (NaN or infinity) at position {}",
                           start + p.step.n_new - 1));
        continue;
      }
      acc = spec::accept_drafts(p.drafts(), std::span<const int32_t>(sampled).subspan(row, n_rows));
    }
    const size_t first_row = row;
    row += size_t(p.n_logit_rows());
    // Checkpoint: a rejected draft leaves the slot's state past the committed tokens, so the sequence stays at
    // the step's start (its checkpoint) and nothing of this step is committed to the caches. Replay records:
    // the step's own tokens and the accepted drafts are committed (their records folded into the slot before
    // the next step; the MLA cache past them is written again before it is read), the rest is forgotten.
    const bool rejected = acc.n_accepted < p.n_drafts, records = p.step.kda_records;
    if (!rejected || records) {
      const int n_committed = p.step.n_new - (p.n_drafts - acc.n_accepted);
      s->n_computed += n_committed;
      if (records) {
        // Blocks are kept up to the position the next step feeds (the token sampled after the last committed).
        if (Status st = caches_.fold_records(&s->cache, n_committed, s->n_computed + 1); !st.ok()) {
          finish(s->id, FinishReason::Error, st.message());
          continue;
        }
      }
      // Index the blocks this step filled and take the snapshots due here (prefix caching): first those the
      // step saved inside itself (staging slots), in order, then the one at its end. Errors (device copies)
      // only cost cache entries: the sequence's own blocks and slot are left as they are.
      // Accepted drafts are committed tokens too, though appended below: the index needs them now.
      std::vector<int32_t> with_drafts;
      if (p.n_drafts > 0 && caches_.prefix_caching()) {
        with_drafts = s->tokens;
        with_drafts.insert(with_drafts.end(), p.drafts().begin(), p.drafts().begin() + acc.n_accepted);
      }
      const std::span<const int32_t> committed = with_drafts.empty() ? s->tokens : with_drafts;
      for (const model::KdaSnapshotRequest& r : p.step.kda_snapshots)
        (void)caches_.commit(&s->cache, committed, s->n_prompt, r.pos, r.slot);
      (void)caches_.commit(&s->cache, committed, s->n_prompt, s->n_computed);
    }
    if (!p.samples) continue;
    if (p.n_drafts > 0) {
      spec_.n_drafts++;
      spec_.n_draft_tokens += uint64_t(p.n_drafts);
      spec_.n_accepted_tokens += uint64_t(acc.n_accepted);
      spec_.acceptance_lengths[std::min(acc.emitted.size(), spec_.acceptance_lengths.size()) - 1]++;
      if (s->speculates && !s->acceptance.observe(acc.n_accepted, limits_.break_even, verify_ratio)) {
        s->speculates = false;
        spec_.n_stopped++;
      }
    }
    s->rolled_back = false;
    // The emitted tokens one at a time, with exactly the checks a step per token would make.
    const int32_t first_position = start + p.step.n_new - p.n_logit_rows();
    bool ended = false;
    for (size_t i = 0; i < acc.emitted.size() && !ended; ++i) {
      const int32_t id = acc.emitted[i];
      s->tokens.push_back(id);
      s->output_counts[id]++;
      const int32_t n_gen = s->n_generated();
      const SamplingParams& sp = s->params;
      const bool eos = !sp.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
      const bool stop_id =
          std::find(sp.stop_token_ids.begin(), sp.stop_token_ids.end(), id) != sp.stop_token_ids.end();
      // The sampler masks stop ids for the first min_tokens tokens; one sampled anyway (the mask would have
      // left nothing to sample) does not end the sequence there.
      if (n_gen > sp.min_tokens && (eos || stop_id)) {
        s->last_is_stop_token = true;
        finish(s->id, FinishReason::Stop, eos ? "eos" : std::to_string(id));
        ended = true;
      } else if (n_gen >= s->max_new_tokens || int(s->tokens.size()) >= limits_.max_model_len) {
        finish(s->id, FinishReason::Length);
        ended = true;
      }
      if (!sink) continue;
      const std::optional<std::string> matched =
          sink(*s, {id, int(first_row + i), first_position + int32_t(i)});
      if (matched && !s->last_is_stop_token) {
        s->stopped_on_string = true;
        if (!ended) finish(s->id, FinishReason::Stop, *matched);
        ended = true;
      }
    }
    if (ended || !rejected || records) continue;
    // Back to the checkpoint (the state at `start`); blocks past the committed tokens go back to the pool.
    if (Status st = caches_.roll_back(&s->cache, int(s->tokens.size())); !st.ok()) {
      finish(s->id, FinishReason::Error, st.message());
      continue;
    }
    s->rolled_back = true;
  }
}

// A release that fails (an id released twice, or never handed out) is a bookkeeping bug, not the request's
// doing: the request finishes with that Internal error instead of `reason`, so the client and the log see it.
void Scheduler::retire(std::unique_ptr<Sequence> seq, FinishReason reason, std::string detail) {
  if (drafter_) {
    const std::span<const int32_t> all(seq->tokens);
    drafter_->observe_finished(all.first(size_t(seq->n_prompt)), all.subspan(size_t(seq->n_prompt)));
  }
  if (Status st = caches_.release(&seq->cache); !st.ok()) {
    reason = FinishReason::Error;
    detail = st.message();
  }
  finished_.push_back({std::move(seq), reason, std::move(detail)});
}

void Scheduler::finish(uint64_t id, FinishReason reason, std::string detail) {
  const auto has_id = [id](const std::unique_ptr<Sequence>& s) { return s->id == id; };
  if (auto it = std::find_if(running_.begin(), running_.end(), has_id); it != running_.end()) {
    retire(std::move(*it), reason, std::move(detail));
    running_.erase(it);
  } else if (auto w = std::find_if(waiting_.begin(), waiting_.end(), has_id); w != waiting_.end()) {
    retire(std::move(*w), reason, std::move(detail));
    waiting_.erase(w);
  }
}

void Scheduler::finish_all(FinishReason reason) {
  for (auto& s : running_) retire(std::move(s), reason, {});
  running_.clear();
  for (auto& s : waiting_) retire(std::move(s), reason, {});
  waiting_.clear();
}

std::vector<Scheduler::Finished> Scheduler::take_finished() {
  std::vector<Finished> out;
  out.swap(finished_);
  return out;
}

}  // namespace rill::engine
