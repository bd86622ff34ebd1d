#include "runner/draft_proposer.h"

#include <algorithm>

#include "core/log.h"

namespace rill::runner {

// One request on its way through the draft model: its context, then the drafts so far.
struct DraftProposer::Job {
  std::vector<int32_t> tokens;
  int n_context = 0;
  int want = 0;        // drafts to make
  int n_computed = 0;  // tokens in the caches
  bool admitted = false, done = false;
  cache::SequenceCache cache;
  int drafted() const { return int(tokens.size()) - n_context; }
};

RunnerOptions draft_runner_options(const RunnerOptions& target) {
  RunnerOptions d;
  d.max_batch_size = target.max_batch_size;
  d.max_num_tokens = target.max_num_tokens;
  d.max_model_len = target.max_model_len;
  d.block_size = target.block_size;
  d.num_kv_blocks = target.num_kv_blocks > 0 ? 2 * target.num_kv_blocks : 0;
  d.kv_cache_fraction = kDraftKvCacheFraction;
  d.prefix.enabled = true;
  d.prefix.snapshot_interval = d.block_size;
  d.prefix.snapshot_budget_bytes = std::min(target.prefix.snapshot_budget_bytes, kDraftSnapshotBudgetBytes);
  // Enough staging slots for every block boundary one step can pass (the engine's rule for its own).
  d.prefix.staging_slots = d.max_num_tokens / d.prefix.snapshot_interval + std::min(d.max_batch_size, 8);
  d.enforce_eager = target.enforce_eager;
  d.capture_graphs = target.capture_graphs;
  return d;
}

Result<std::unique_ptr<DraftProposer>> DraftProposer::create(backend::Backend& be,
                                                             const RunnerOptions& target,
                                                             int64_t target_vocab) {
  const DraftModelOptions& dm = target.draft;
  RILL_LOG_INFO("loading the draft model {}", dm.dir);
  model::LoadOptions lo;
  lo.dummy_weights = dm.dummy_weights;
  auto loaded = model::load_model(dm.dir, be, lo);
  if (!loaded.ok()) return loaded.status().with_context("draft model " + dm.dir);
  const int64_t vocab = (*loaded)->config().vocab_size;
  if (vocab != target_vocab)
    return invalid_argument(
        "--speculative-config: the draft model's vocabulary has {} tokens, the model's {}", vocab,
        target_vocab);
  RunnerOptions o = draft_runner_options(target);
  RILL_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner,
                        ModelRunner::create(std::move(loaded).value(), o));
  RILL_ASSIGN_OR_RETURN(cache::CacheManager caches,
                        cache::CacheManager::create(runner->memory_plan(), runner->prefix_options()));
  return std::unique_ptr<DraftProposer>(
      new DraftProposer(std::move(runner), std::move(caches), std::move(o)));
}

std::vector<std::vector<int32_t>> DraftProposer::propose(std::span<const DraftRequest> requests) {
  const int max_len = runner_->max_model_len();
  std::vector<Job> jobs(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& r = requests[i];
    Job& j = jobs[i];
    const int n = int(r.context.size());
    j.done = r.max_tokens <= 0 || n == 0 || n >= max_len;
    if (j.done) continue;
    j.tokens.assign(r.context.begin(), r.context.end());
    j.n_context = n;
    j.want = std::min(r.max_tokens, max_len - n);
  }
  const Status st = run(jobs);
  if (!st.ok()) RILL_LOG_WARN("draft model: {}; no drafts for this step", st.message());
  std::vector<std::vector<int32_t>> out(requests.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& j = jobs[i];
    if (j.cache.slot >= 0)
      if (Status released = caches_.release(&j.cache); !released.ok())
        RILL_LOG_ERROR("draft model: {}", released.message());
    if (st.ok() && j.drafted() > 0) out[i].assign(j.tokens.begin() + j.n_context, j.tokens.end());
  }
  return out;
}

Status DraftProposer::finish(Job& job) {
  job.done = true;
  return caches_.release(&job.cache);
}

// The engine's schedule in miniature: running jobs first (a decode token, or the next chunk of a prefill),
// then admissions in order while a slot and the first chunk's blocks can be had. There is no preemption: a
// job whose blocks run out ends with the drafts it has, and jobs that cannot be admitted while nothing runs
// end with none.
Status DraftProposer::run(std::vector<Job>& jobs) {
  struct Chunk {
    Job* job;
    int n;
    bool samples;
  };
  const int block_size = caches_.block_size();
  for (;;) {
    model::StepBatch batch;
    std::vector<Chunk> chunks;
    int budget = options_.max_num_tokens, staging_used = 0;
    const auto full = [&] { return int(chunks.size()) >= options_.max_batch_size || budget <= 0; };
    const auto add = [&](Job& j, int n) {
      model::SequenceStep q;
      q.start_pos = j.n_computed;
      q.n_new = n;
      q.state_slot = j.cache.slot;
      q.block_table = j.cache.blocks;
      const bool samples = j.n_computed + n == int(j.tokens.size());
      q.logits = samples ? model::LogitsNeeded::Last : model::LogitsNeeded::None;
      q.kda_snapshots = caches_.plan_snapshots(j.n_computed, n, j.n_context, &staging_used);
      batch.token_ids.insert(batch.token_ids.end(), j.tokens.begin() + j.n_computed,
                             j.tokens.begin() + j.n_computed + n);
      batch.seqs.push_back(std::move(q));
      chunks.push_back({&j, n, samples});
      budget -= n;
    };
    for (Job& j : jobs) {
      if (!j.admitted || j.done) continue;
      if (full()) break;
      const int n = caches_.chunk_end(j.n_computed, budget, j.n_context, int(j.tokens.size())) - j.n_computed;
      if (caches_.grow(&j.cache, j.n_computed + n).ok()) {
        add(j, n);
      } else {
        RILL_TRY(finish(j));
      }
    }
    for (Job& j : jobs) {
      if (j.admitted || j.done) continue;
      if (full()) break;
      const cache::PrefixHit hit = caches_.find_prefix(j.tokens);
      const int start = hit.n_tokens(block_size);
      const int n = caches_.chunk_end(start, budget, j.n_context, int(j.tokens.size())) - start;
      if (!caches_.can_admit(hit, start + n) || !caches_.admit(&j.cache, hit, start + n).ok()) break;
      j.admitted = true;
      j.n_computed = start;
      add(j, n);
    }
    if (chunks.empty()) {
      for (Job& j : jobs) j.done = true;  // none runs, none can be admitted
      return {};
    }
    SamplingBatch greedy;
    for (const Chunk& c : chunks)
      if (c.samples) greedy.rows.emplace_back();  // a default row: temperature 0
    RILL_ASSIGN_OR_RETURN(StepOutput out, runner_->execute(batch, greedy, caches_.take_ops()));
    ++steps_;
    size_t row = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      Job& j = *chunks[i].job;
      j.n_computed += chunks[i].n;
      // Index the blocks this step filled and take the snapshots due (failures only cost cache entries).
      for (const model::KdaSnapshotRequest& r : batch.seqs[i].kda_snapshots)
        (void)caches_.commit(&j.cache, j.tokens, j.n_context, r.pos, r.slot);
      (void)caches_.commit(&j.cache, j.tokens, j.n_context, j.n_computed);
      if (!chunks[i].samples) continue;
      const SampledToken& t = out.tokens.at(row++);
      if (t.nonfinite) {  // a broken draft forward: no drafts from it
        j.tokens.resize(size_t(j.n_context));
        RILL_TRY(finish(j));
        continue;
      }
      j.tokens.push_back(t.id);
      if (j.drafted() >= j.want) RILL_TRY(finish(j));
    }
  }
}

}  // namespace rill::runner
