#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "cache/cache_manager.h"
#include "core/log.h"
#include "engine/scheduler.h"
#include "engine/spec/draft_model_drafter.h"
#include "engine/step_sampling.h"
#include "engine/stop_checker.h"
#include "runner/executor.h"

namespace rill::engine {

struct Engine::Impl {
  // The engine's only view of the devices: it runs each step (and owns the model, caches and sampler).
  std::unique_ptr<runner::Executor> exec;
  bool released = false;  // the model was handed back (release_model)
  std::shared_ptr<const text::Tokenizer> tokenizer;
  EngineOptions opts;
  // The engine thread's alone: no other thread reads the scheduler or the caches, not even their sizes.
  std::unique_ptr<cache::CacheManager> caches;
  std::unique_ptr<Scheduler> sched;
  std::unique_ptr<StepSampling> sampling;
  std::unique_ptr<MaskPool> masks;               // constrained sequences' next-token masks, off this thread
  std::shared_ptr<spec::Drafter> drafter;  // speculative decoding's, or null (method draft_model: on `exec`)
  EngineStats counters;  // the engine thread's running totals (steps, tokens, finished requests)
  int max_model_len = 0;
  std::atomic<uint64_t> next_id{1};

  // What the caller threads (submit, cancel, stats, reset_prefix_cache, shutdown) and the engine thread
  // share: the fields from here to `reset_status` are read and written under `mu` only, and the engine thread
  // never holds it across a model step.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<Sequence>> incoming;
  std::vector<uint64_t> cancels;
  bool accepting = true, stopping = false, drain = false;
  EngineStats published;  // the scheduler's and caches' state as the engine thread last saw it
  // reset_prefix_cache requests, served by the engine thread (it owns the caches).
  uint64_t resets_asked = 0, resets_done = 0;
  // What the pending reset does (resets of different kinds are not mixed: tests, benches).
  enum class Reset { Evict, ToHost, ToDisk };
  Reset reset_kind = Reset::Evict;
  Status reset_status;
  Status cache_reset(Reset kind);
  Status do_reset(Reset kind);
  // Disk tier: reads the prefixes of the requests about to be admitted in from disk (before schedule()).
  void stage_disk_hits();
  // Disk tier: everything cached to disk, then waits for the writes (shutdown, persist_prefix_cache).
  Status persist_to_disk();
  std::mutex join_mu;  // one shutdown joins the thread; a concurrent one waits for it
  std::thread thread;

  void loop();
  void step();
  // Set once by the engine thread: binding it to the backend's device (a failure fails every step).
  Status device_bound;
  void finish_all(FinishReason reason, const Status& error);  // shutdown without drain
  void emit_finished(std::map<uint64_t, StreamEvent>& pending);
  // Copies the scheduler's and caches' state and the counters into `published` (with `mu` held).
  void publish_locked();
  void publish() {
    std::lock_guard lock(mu);
    publish_locked();
  }
  // Requests not admitted yet: still in `incoming`, or waiting in the scheduler (with `mu` held).
  int waiting_locked() const { return published.waiting + int(incoming.size()); }
  // The logits of the row `t` was sampled from (only rows whose token is emitted: a verify step's rejected
  // positions are not shown).
  void call_logits_hook(const Sequence& s, const EmittedToken& t, const runner::StepOutput& out);
};

void Engine::Impl::publish_locked() {
  EngineStats& s = published;
  s = counters;
  s.running = sched->n_running();
  s.waiting = sched->n_waiting();
  s.kv_blocks_used = caches->blocks_in_use();
  s.kv_blocks_total = caches->blocks().capacity();
  s.state_slots_used = caches->slots().used_count();
  s.state_slots_total = caches->slots().capacity();
  s.preemptions = sched->preemptions();
  s.prefix_cache_queries = sched->prefix_queries();
  s.prefix_cache_hits = sched->prefix_hits();
  s.prefix_cache_blocks = caches->index().n_entries();
  s.kda_snapshots_used = caches->snapshots().used_count();
  s.kda_snapshots_total = caches->snapshots().capacity();
  s.prefix_cache_evicted_blocks = caches->evicted_blocks();
  s.kda_snapshots_evicted = caches->evicted_snapshots();
  s.prefix_cache_hits_host = sched->prefix_hits_host();
  s.kv_offload_bytes_to_host = caches->tier_bytes_to_host();
  s.kv_offload_bytes_to_device = caches->tier_bytes_to_device();
  s.host_tier_blocks = caches->host_blocks().used_count();
  s.host_tier_blocks_total = caches->host_blocks().capacity();
  s.host_tier_snapshots = caches->host_snapshots().used_count();
  s.host_tier_snapshots_total = caches->host_snapshots().capacity();
  s.prefix_cache_hits_disk = sched->prefix_hits_disk();
  if (const std::optional<runner::DiskTierStats> d = exec->disk_stats()) {
    s.disk_tier = true;
    s.kv_offload_bytes_to_disk = d->bytes_written;
    s.kv_offload_bytes_from_disk = d->bytes_read;
    s.kv_offload_disk_read_seconds = d->read_seconds;
    s.disk_tier_files = d->files;
    s.disk_tier_bytes = d->bytes_on_disk;
    s.disk_tier_write_errors = d->write_errors;
    s.disk_tier_read_errors = d->read_errors;
    s.disk_tier_writes_dropped = d->writes_dropped;
  }
  const SpecDecodeStats& sd = sched->spec_decode();
  s.spec_num_drafts = sd.n_drafts;
  s.spec_num_draft_tokens = sd.n_draft_tokens;
  s.spec_num_accepted_tokens = sd.n_accepted_tokens;
  s.spec_num_stopped_sequences = sd.n_stopped;
  if (drafter) s.spec_acceptance_lengths = sd.acceptance_lengths;
}

// Final events: the held-back text, the finish reason and usage; the sequence's caches are already free.
void Engine::Impl::emit_finished(std::map<uint64_t, StreamEvent>& pending) {
  std::vector<Scheduler::Finished> finished = sched->take_finished();
  counters.requests_finished += finished.size();
  // Before any final event: a caller that saw its request finish sees it counted and its caches freed.
  publish();
  for (auto& f : finished) {
    Sequence& s = *f.seq;
    StreamEvent ev = std::move(pending[s.id]);
    pending.erase(s.id);
    if (f.reason != FinishReason::Error && !s.stopped_on_string) ev.text += s.stop->flush();
    ev.finish = f.reason;
    ev.stop_reason = f.detail;
    if (f.reason == FinishReason::Error) {
      RILL_LOG_ERROR("request {} failed: {}", s.id, f.detail);
      ev.error = Status(StatusCode::Internal, f.detail);
    }
    ev.prompt_tokens = s.reported_prompt_tokens;
    ev.completion_tokens = s.n_generated();
    ev.cached_tokens = std::clamp(s.n_cached, 0, s.reported_prompt_tokens);
    using Seconds = std::chrono::duration<double>;
    if (s.first_scheduled) ev.queue_seconds = Seconds(*s.first_scheduled - s.arrival).count();
    if (s.first_scheduled && s.first_token)
      ev.prefill_seconds = Seconds(*s.first_token - *s.first_scheduled).count();
    s.stream->push(std::move(ev));
  }
  for (auto& [id, ev] : pending)
    if (!ev.token_ids.empty() || !ev.text.empty()) {
      Sequence* s = sched->find(id);
      if (s) s->stream->push(std::move(ev));
    }
  pending.clear();
}

void Engine::Impl::finish_all(FinishReason reason, const Status& error) {
  {
    std::lock_guard lock(mu);
    for (auto& s : incoming) sched->add(std::move(s));
    incoming.clear();
  }
  sched->finish_all(reason);
  std::map<uint64_t, StreamEvent> none;
  emit_finished(none);
}

// A waiting request whose longest hit reaches into the disk tier has those items read into the host tier now,
// on this thread, before it is scheduled; the admission then finds them there like any host hit. A read that
// fails (logged by the disk tier) only shortens the hit. The tier reads the hit's files in parallel on its
// readers; running requests wait for them all the same (no read-ahead yet).
void Engine::Impl::stage_disk_hits() {
  if (!caches->disk_tier()) return;
  for (Sequence* s : sched->waiting_head(opts.max_batch_size)) {
    if (s->disk_staged) continue;
    s->disk_staged = true;
    Result<std::vector<cache::DiskLoad>> loads = caches->stage_from_disk(s->tokens);
    if (!loads.ok()) {
      RILL_LOG_ERROR("disk tier: request {}: {}", s->id, loads.status().message());
      continue;
    }
    if (loads->empty()) continue;
    // The ops staging queued first (items it pushed out of the host tier, to disk): they free the ids read into.
    Result<runner::StepOutput> applied = exec->execute(model::StepBatch{}, runner::SamplingBatch{}, caches->take_ops());
    if (!applied.ok()) RILL_LOG_ERROR("disk tier: request {}: {}", s->id, applied.status().message());
    const std::vector<bool> ok =
        applied.ok() ? exec->load_from_disk(*loads) : std::vector<bool>(loads->size(), false);
    if (Status st = caches->finish_disk_loads(*loads, ok); !st.ok())
      RILL_LOG_ERROR("disk tier: request {}: {}", s->id, st.message());
  }
}

Status Engine::Impl::persist_to_disk() {
  if (!caches->disk_tier()) return {};
  RILL_TRY(caches->persist_all());
  cache::CacheOps ops = caches->take_ops();
  ops.disk_writes_wait = true;  // every item, however far behind the writer is
  RILL_TRY(exec->execute(model::StepBatch{}, runner::SamplingBatch{}, ops).status());
  exec->drain_disk();
  return {};
}

void Engine::Impl::step() {
  stage_disk_hits();
  if (opts.wait_for_masks) {  // tests: a mask computation takes microseconds; a minute means a lost one
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (sched->masks_pending() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  }
  StepPlan plan = sched->schedule();
  publish();  // admissions and preemptions: submit's queue check counts what is still waiting
  std::map<uint64_t, StreamEvent> pending;
  if (plan.empty()) {
    emit_finished(pending);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return;
  }
  if (!device_bound.ok()) {
    for (const auto& p : plan.seqs) sched->finish(p.seq->id, FinishReason::Error, device_bound.message());
    emit_finished(pending);
    return;
  }
  const auto step_start = std::chrono::steady_clock::now();
  for (const auto& p : plan.seqs)
    if (!p.seq->first_scheduled) p.seq->first_scheduled = step_start;
  const model::StepBatch batch = plan.batch();
  // One sampling row per logits row: row j of a verify step follows drafts d_1..d_j.
  std::vector<StepSampling::Row> rows;
  for (const auto& p : plan.seqs)
    for (int r = 0; r < p.n_logit_rows(); ++r)
      rows.push_back({p.seq, p.drafts().first(size_t(r))});
  // The cache operations of this step's admissions and of the last step's commits travel with it.
  runner::SamplingBatch sampling_batch = sampling->make(rows, bool(opts.logits_hook));
  if (opts.poison_logits)
    for (size_t r = 0; r < rows.size(); ++r)
      sampling_batch.rows[r].poison_logits = opts.poison_logits(rows[r].seq->id, rows[r].n_generated());
  auto out = exec->execute(batch, sampling_batch, caches->take_ops());
  if (!out.ok()) {  // every request of the step fails with the step's error (logged when it finishes)
    for (const auto& p : plan.seqs) sched->finish(p.seq->id, FinishReason::Error, out.status().message());
    emit_finished(pending);
    return;
  }
  const std::vector<runner::SampledToken>& sampled = out->tokens;
  std::vector<int32_t> ids;
  std::vector<uint8_t> nonfinite;  // such a row's request ends with an error; the others go on
  for (const auto& t : sampled) ids.push_back(t.id), nonfinite.push_back(t.nonfinite);
  counters.steps++;
  counters.kv_offload_wait_seconds += out->tier_copy_seconds;
  int iteration_tokens = 0;
  for (const auto& p : plan.seqs)
    if (p.seq->n_computed < p.seq->n_prompt) {
      counters.prompt_tokens_total += uint64_t(p.step.n_new);
      iteration_tokens += p.step.n_new;
    }
  const auto step_end = std::chrono::steady_clock::now();
  if (out->replayed)  // a steady-state step's cost (speculation's break-even)
    sched->record_replayed_step(plan, std::chrono::duration<double>(step_end - step_start).count());
  // Each emitted token in order (a verify step's accepted drafts, then its last token), as a step per token
  // would see it: its logprobs, the constraint, the text with stop strings. A stop string ends the sequence
  // at its token; the scheduler drops the rest.
  const auto sink = [&](Sequence& seq, const EmittedToken& t) -> std::optional<std::string> {
    Sequence* s = &seq;
    counters.generation_tokens_total++;
    iteration_tokens++;
    if (opts.logits_hook) call_logits_hook(*s, t, *out);
    StreamEvent& ev = pending[s->id];
    const runner::SampledToken& st = sampled[size_t(t.row)];
    if (s->constraint) s->constraint->accept(t.id);  // its mask was ready (it sampled): no worker holds it
    ev.token_ids.push_back(t.id);
    if (!s->first_token) s->first_token = step_end;
    if (s->params.logprobs >= 0) ev.logprobs.push_back({t.id, st.logprob, st.top});
    // An EOS / stop id ends the text without its own (vLLM), unless the stop is to be kept.
    if (s->last_is_stop_token && !s->params.include_stop_str_in_output) return std::nullopt;
    std::optional<std::string> matched;
    ev.text += s->stop->push(t.id, &matched);
    return matched;
  };
  sched->postprocess(plan, ids, sink, nonfinite);
  counters.observe_iteration_tokens(iteration_tokens);
  // The next masks of the constrained sequences that go on, computed while this thread emits and runs the
  // next step; until one is ready its sequence sits out (Scheduler::schedule).
  // A speculating one's drafts for that step go with it, so their positions' masks are computed too.
  for (const auto& p : plan.seqs)
    if (p.samples && p.seq->constraint && sched->find(p.seq->id)) {
      p.seq->constraint->set_drafts(sched->propose_for_mask(*p.seq));
      masks->start(p.seq->constraint);
    }
  emit_finished(pending);
}

void Engine::Impl::call_logits_hook(const Sequence& s, const EmittedToken& t, const runner::StepOutput& out) {
  const size_t vocab = static_cast<size_t>(out.vocab);
  opts.logits_hook(s.id, t.position,
                   std::span<const float>(out.logits).subspan(size_t(t.row) * vocab, vocab));
}

void Engine::Impl::loop() {
  // The backend was created on the caller's thread; every step runs here, on the backend's device (cuda:N).
  device_bound = exec->bind_thread();
  if (!device_bound.ok()) RILL_LOG_ERROR("engine thread: {}", device_bound.to_string());
  for (;;) {
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] {
        return stopping || !incoming.empty() || !cancels.empty() || !sched->idle() ||
               resets_asked > resets_done;
      });
      if (resets_asked > resets_done) {
        const uint64_t asked = resets_asked;
        lock.unlock();  // persisting waits for the disk
        Status st = do_reset(reset_kind);
        lock.lock();
        reset_status = std::move(st);
        resets_done = asked;
        cv.notify_all();
      }
      while (!incoming.empty()) {
        sched->add(std::move(incoming.front()));
        incoming.pop_front();
      }
      for (uint64_t id : cancels) sched->finish(id, FinishReason::Cancelled);
      cancels.clear();
      publish_locked();  // under the same lock: stats() sees each request either incoming or waiting
      if (stopping && !drain) {
        lock.unlock();
        finish_all(FinishReason::Cancelled, {});
        if (Status st = persist_to_disk(); !st.ok()) RILL_LOG_ERROR("disk tier: at shutdown: {}", st.message());
        return;
      }
      if (stopping && sched->idle()) {
        lock.unlock();
        if (Status st = persist_to_disk(); !st.ok()) RILL_LOG_ERROR("disk tier: at shutdown: {}", st.message());
        return;
      }
    }
    if (sched->idle()) {
      std::map<uint64_t, StreamEvent> none;
      emit_finished(none);
      continue;
    }
    step();
  }
}

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<model::Model> model,
                                               std::shared_ptr<const text::Tokenizer> tokenizer,
                                               const EngineOptions& o) {
  if (!model) return invalid_argument("engine: no model");
  auto local = [&model](const runner::RunnerOptions& ro) {
    return runner::make_local_executor(std::move(model), ro);
  };
  return create(local, std::move(tokenizer), o);
}

Result<std::unique_ptr<Engine>> Engine::create(const ExecutorFactory& make_executor,
                                               std::shared_ptr<const text::Tokenizer> tokenizer,
                                               const EngineOptions& o) {
  if (o.max_batch_size < 1) return invalid_argument("--max-batch-size must be at least 1");
  if (o.max_num_tokens < 1) return invalid_argument("--max-num-tokens must be at least 1");
  if (o.mask_threads < 0) return invalid_argument("mask_threads must be 0 (automatic) or more");
  if (o.kv_offloading_gib < 0) return invalid_argument("--kv-offloading-size {} must be 0 or more", o.kv_offloading_gib);
  if (o.kv_offloading_gib > 0 && !o.enable_prefix_caching)
    return invalid_argument("--kv-offloading-size keeps evicted prefix-cache blocks: it needs --enable-prefix-caching");
  if (!o.kv_offloading_dir.empty() && o.kv_offloading_gib <= 0)
    return invalid_argument("--kv-offloading-dir {}: the disk tier sits below the host tier: it needs --kv-offloading-size GiB",
                            o.kv_offloading_dir);
  if (o.kv_offloading_disk_gib < 0)
    return invalid_argument("--kv-offloading-disk-size {} must be 0 (no cap) or more", o.kv_offloading_disk_gib);
  if (o.gpu_memory_utilization < 0 || o.gpu_memory_utilization > 1)
    return invalid_argument("--gpu-memory-utilization {} must be in (0, 1]", o.gpu_memory_utilization);
  RILL_TRY(o.speculative.validate());
  if (o.drafter && !o.speculative.enabled())
    return invalid_argument("a drafter was given but speculative decoding is off (num_speculative_tokens 0)");
  auto impl = std::make_unique<Impl>();
  impl->opts = o;
  if (o.speculative.enabled()) {
    if (o.drafter) {
      impl->drafter = o.drafter;
    } else if (o.speculative.method == "draft_model") {
      // Made with the executor, which runs the draft model (below).
    } else {
      RILL_ASSIGN_OR_RETURN(std::unique_ptr<spec::Drafter> d, spec::make_drafter(o.speculative));
      impl->drafter = std::move(d);
    }
  }
  impl->tokenizer = std::move(tokenizer);
  runner::RunnerOptions ro;
  ro.max_batch_size = o.max_batch_size;
  ro.max_num_tokens = o.max_num_tokens;
  ro.max_model_len = o.max_model_len;
  ro.kv_cache_fraction = o.kv_cache_fraction;
  ro.gpu_memory_utilization = o.gpu_memory_utilization;
  ro.num_kv_blocks = o.num_kv_blocks;
  ro.block_size = o.block_size;
  ro.enforce_eager = o.enforce_eager;
  ro.capture_graphs = o.capture_graphs;
  ro.num_speculative_tokens = o.speculative.enabled() ? o.speculative.num_speculative_tokens : 0;
  ro.kda_rollback = o.speculative.kda_rollback;
  ro.host_tier_bytes = int64_t(o.kv_offloading_gib * double(1ll << 30));
  ro.disk_tier.dir = o.kv_offloading_dir;
  ro.disk_tier.max_bytes = int64_t(o.kv_offloading_disk_gib * double(1ll << 30));
  ro.model_identity = o.model_identity;
  const bool draft_model = o.speculative.enabled() && !o.drafter && o.speculative.method == "draft_model";
  if (draft_model) ro.draft = {o.speculative.draft_model, o.draft_dummy_weights};
  cache::PrefixCacheOptions& prefix = ro.prefix;
  prefix.enabled = o.enable_prefix_caching;
  prefix.snapshot_interval = o.kda_snapshot_interval;
  prefix.snapshot_budget_bytes = int64_t(o.kda_snapshot_budget_mib) << 20;
  // Enough staging slots for every snapshot position one step can pass (interval multiples and a prompt's
  // last full block, for each sequence of the step) — with fewer, some positions just go unsaved. The runner
  // drops them where the backend cannot take snapshots inside a step.
  if (o.enable_prefix_caching && o.kda_snapshots_in_step && o.kda_snapshot_interval > 0)
    prefix.staging_slots = o.max_num_tokens / o.kda_snapshot_interval + std::min(o.max_batch_size, 8);
  RILL_ASSIGN_OR_RETURN(impl->exec, make_executor(ro));
  if (draft_model) {
    if (!impl->exec->has_draft_model())
      return invalid_argument("--speculative-config: method \"draft_model\" needs an executor that runs the draft "
                              "model (RunnerOptions::draft)");
    impl->drafter = std::make_shared<spec::DraftModelDrafter>(*impl->exec);
  }
  const model::ModelConfig& c = impl->exec->model().config();
  const std::vector<int32_t> eos_ids = c.eos_token_ids;
  const int64_t vocab = c.vocab_size;
  RILL_ASSIGN_OR_RETURN(cache::CacheManager cm,
                        cache::CacheManager::create(impl->exec->memory_plan(), impl->exec->prefix_options()));
  impl->caches = std::make_unique<cache::CacheManager>(std::move(cm));
  if (impl->caches->disk_tier()) {
    const std::vector<cache::DiskRecord> found = impl->exec->take_disk_records();
    const int n = impl->caches->index_disk(found);
    if (n < int(found.size()))
      RILL_LOG_INFO("disk tier {}: {} of its {} items indexed (the others continue chains whose first blocks are "
                    "gone)", o.kv_offloading_dir, n, found.size());
  }
  // One sequence must always fit in the cache on its own, so recompute preemption always makes progress.
  impl->max_model_len = impl->exec->max_model_len();
  SchedulerLimits sl{o.max_batch_size, o.max_num_tokens, impl->max_model_len, o.chunked_prefill,
                     ro.num_speculative_tokens, o.speculation_break_even};
  impl->sched = std::make_unique<Scheduler>(*impl->caches, sl, eos_ids, impl->drafter.get());
  impl->sampling = std::make_unique<StepSampling>(eos_ids, vocab);
  impl->masks = std::make_unique<MaskPool>(
      o.mask_threads > 0 ? o.mask_threads : std::clamp(int(std::thread::hardware_concurrency()) / 8, 1, 4));
  impl->publish();
  Impl* p = impl.get();
  impl->thread = std::thread([p] { p->loop(); });
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  shutdown(false);
}

Result<std::shared_ptr<RequestStream>> Engine::submit(Request r) {
  Impl& m = *impl_;
  if (m.released) return unavailable("the engine has handed its model back");
  const model::ModelConfig& c = m.exec->model().config();
  if (r.prompt.empty()) return invalid_argument("prompt: must contain at least one token");
  for (int32_t id : r.prompt)
    if (id < 0 || id >= c.vocab_size)
      return invalid_argument("prompt: token id {} is outside the vocabulary [0, {})", id, c.vocab_size);
  RILL_TRY(r.params.validate(c.vocab_size));
  const int n = int(r.prompt.size());
  if (n >= m.max_model_len)
    return invalid_argument("prompt: {} tokens leave no room in the context of {} tokens", n,
                            m.max_model_len);
  if (!m.opts.chunked_prefill && n > m.opts.max_num_tokens)
    return invalid_argument("prompt: {} tokens exceed --max-num-tokens {} with chunked prefill off", n,
                            m.opts.max_num_tokens);
  auto seq = std::make_unique<Sequence>();
  seq->id = m.next_id++;
  seq->tokens = r.prompt;
  seq->n_prompt = n;
  seq->reported_prompt_tokens = r.reported_prompt_tokens >= 0 ? r.reported_prompt_tokens : n;
  seq->params = r.params;
  if (r.constraint) {
    seq->constraint =
        std::make_shared<ConstraintMask>(std::move(r.constraint), size_t(c.vocab_size + 31) / 32);
    m.masks->start(seq->constraint);  // the first token's mask, while the prompt waits and prefills
  }
  seq->max_new_tokens = std::min(r.params.max_tokens, m.max_model_len - n);
  // Every request may speculate: a verify step's row j is sampled as the step per token at that position
  // would be (StepSampling::Row: draw counter, penalty counts, min_tokens, grammar mask; the row's logprobs),
  // and sampling each row then accepting while the draw equals the draft is the speculative-sampling rule
  // for drafts without a distribution (spec/acceptance.h). A constraint that cannot fork gets no drafts.
  seq->speculates = m.drafter != nullptr;
  seq->seed = r.params.seed ? *r.params.seed : std::random_device{}() * 0x9e3779b97f4a7c15ull;
  if (r.params.repetition_penalty != 1.0f) seq->prompt_tokens.insert(r.prompt.begin(), r.prompt.end());
  seq->stop = std::make_unique<StopChecker>(m.tokenizer.get(), r.params);
  seq->stream = std::make_shared<RequestStream>(seq->id);
  seq->arrival = std::chrono::steady_clock::now();
  auto stream = seq->stream;
  {
    std::lock_guard lock(m.mu);
    if (!m.accepting) return unavailable("the server is shutting down");
    if (m.waiting_locked() >= m.opts.max_queue)
      return resource_exhausted("the request queue is full ({} waiting); retry later", m.opts.max_queue);
    m.incoming.push_back(std::move(seq));
  }
  m.cv.notify_all();
  return stream;
}

void Engine::cancel(uint64_t id) {
  {
    std::lock_guard lock(impl_->mu);
    impl_->cancels.push_back(id);
  }
  impl_->cv.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard lock(impl_->mu);
  EngineStats s = impl_->published;
  s.waiting = impl_->waiting_locked();
  return s;
}

Status Engine::reset_prefix_cache() {
  return impl_->cache_reset(Impl::Reset::Evict);
}

Status Engine::offload_prefix_cache() {
  return impl_->cache_reset(Impl::Reset::ToHost);
}

Status Engine::persist_prefix_cache() {
  return impl_->cache_reset(Impl::Reset::ToDisk);
}

Status Engine::Impl::do_reset(Reset kind) {
  switch (kind) {
    case Reset::Evict:
      return caches->evict_all();
    case Reset::ToHost:
      return caches->offload_all();
    case Reset::ToDisk:
      return persist_to_disk();
  }
  return {};
}

Status Engine::Impl::cache_reset(Reset kind) {
  Status st;
  {
    std::unique_lock lock(mu);
    if (stopping) return unavailable("the engine is shutting down");
    const uint64_t ticket = ++resets_asked;
    reset_kind = kind;
    cv.notify_all();
    cv.wait(lock, [&] { return resets_done >= ticket || stopping; });
    if (resets_done < ticket) return unavailable("the engine is shutting down");
    st = reset_status;
  }
  return st;
}

void Engine::shutdown(bool drain) {
  if (!impl_) return;
  {
    std::lock_guard lock(impl_->mu);
    // A later call may turn a drain into a cancel ("signal again to cancel"), not a cancel into a drain.
    impl_->drain = drain && (!impl_->stopping || impl_->drain);
    impl_->accepting = false;
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  std::lock_guard join_lock(impl_->join_mu);
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::unique_ptr<model::Model> Engine::release_model() {
  shutdown(false);
  impl_->released = true;
  return impl_->exec->release_model();
}

const model::Model& Engine::model() const {
  return impl_->exec->model();
}
std::string Engine::device_description() const {
  return impl_->exec->device_description();
}
int Engine::max_model_len() const {
  return impl_->max_model_len;
}
std::string Engine::memory_plan() const {
  return impl_->exec->memory_plan().describe();
}

}  // namespace rill::engine
