#include "runner/model_runner.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "core/log.h"
#include "core/sizes.h"

#include "runner/cache_fingerprint.h"
#include "runner/memory_plan.h"

namespace rill::runner {

std::vector<std::vector<cache::KdaSlotCopy>> copy_waves(const std::vector<cache::KdaSlotCopy>& copies) {
  std::vector<std::vector<cache::KdaSlotCopy>> waves;
  std::set<int32_t> read, written;  // by the last wave
  for (const cache::KdaSlotCopy& c : copies) {
    if (c.from == c.to) continue;
    if (waves.empty() || written.count(c.from) || written.count(c.to) || read.count(c.to)) {
      waves.emplace_back();
      read.clear(), written.clear();
    }
    waves.back().push_back(c);
    read.insert(c.from);
    written.insert(c.to);
  }
  return waves;
}

namespace {

Status apply_slot_copies(backend::Backend& be, const model::ModelCaches& caches,
                         const std::vector<cache::KdaSlotCopy>& copies) {
  for (const auto& wave : copy_waves(copies)) {
    std::vector<backend::DeviceCopy> batch;
    for (const cache::KdaSlotCopy& c : wave)
      for (const model::LayerCache& L : caches.layers)
        for (const TensorView* t : {&L.kda_state, &L.kda_conv}) {
          if (t->empty()) continue;
          const size_t per_slot = t->nbytes() / size_t(t->size(0));  // contiguous [n_slots, ...]
          char* base = static_cast<char*>(t->data);
          batch.push_back({base + size_t(c.to) * per_slot, base + size_t(c.from) * per_slot, per_slot});
        }
    RILL_TRY(be.copy_device_to_device_batch(batch));
  }
  return {};
}

// Replay records' folds (CacheOps::kda_folds): the slots and counts go to the device once, then one kda_fold
// per KDA layer.
Status apply_folds(backend::Backend& be, const model::ModelCaches& caches, const std::vector<cache::KdaFold>& folds) {
  if (folds.empty()) return {};
  const int n = int(folds.size());
  if (n > caches.records.n_slots || caches.fold_args.empty())
    return internal_error("{} replay record folds but the caches hold records for {} slots", n, caches.records.n_slots);
  std::vector<int32_t> args(size_t(2 * caches.records.n_slots), 0);  // slots, then counts
  std::set<int32_t> seen;
  for (int i = 0; i < n; ++i) {
    const cache::KdaFold& f = folds[size_t(i)];
    if (f.slot < 0 || f.slot >= caches.records.n_slots || f.n_tokens < 0 || f.n_tokens > caches.records.n_tokens ||
        !seen.insert(f.slot).second)
      return internal_error("replay record fold of {} tokens into slot {} (records: {} slots x {} tokens; one fold "
                            "per slot)", f.n_tokens, f.slot, caches.records.n_slots, caches.records.n_tokens);
    args[size_t(i)] = f.slot;
    args[size_t(caches.records.n_slots + i)] = f.n_tokens;
  }
  RILL_TRY(be.upload_async(caches.fold_args.data, args.data(), args.size() * sizeof(int32_t)));
  int32_t* dev = caches.fold_args.ptr<int32_t>();
  const TensorView slots = TensorView::make(dev, DType::I32, {n}, be.device());
  const TensorView counts = TensorView::make(dev + caches.records.n_slots, DType::I32, {n}, be.device());
  for (const model::LayerCache& L : caches.layers)
    if (!L.kda_state.empty())
      RILL_TRY(be.kda_fold({L.kda_records, L.kda_conv_records, L.kda_state, L.kda_conv, slots, counts}));
  return {};
}

}  // namespace

Status apply_cache_ops(backend::Backend& be, const model::ModelCaches& caches, const cache::CacheOps& ops,
                       const HostTier* host, double* tier_seconds, DiskTier* disk) {
  for (const cache::KdaSlotCopy& c : ops.kda_slot_copies)
    if (c.from < 0 || c.to < 0 || c.from >= caches.n_slots || c.to >= caches.n_slots)
      return internal_error("KDA slot copy {} -> {} outside [0, {})", c.from, c.to, caches.n_slots);
  if (!ops.tier_copies.empty() && (!host || !host->enabled()))
    return internal_error("{} host tier copies but the runner has no host tier", ops.tier_copies.size());
  if (!ops.disk_writes.empty() && (!host || !host->enabled() || !disk))
    return internal_error("{} disk tier writes but the runner has no disk tier", ops.disk_writes.size());
  RILL_TRY(apply_folds(be, caches, ops.kda_folds));
  const auto& slot = ops.kda_slot_copies;
  size_t done = 0;  // slot copies applied
  // Slot copies up to `upto`, then each run of host tier copies placed there.
  auto slots_until = [&](size_t upto) -> Status {
    upto = std::min(upto, slot.size());
    if (upto <= done) return {};
    RILL_TRY(apply_slot_copies(be, caches, {slot.begin() + long(done), slot.begin() + long(upto)}));
    done = upto;
    return {};
  };
  const auto& spills = ops.disk_writes;
  size_t spilled = 0;
  const auto spill_due = [&](size_t tier_index) { return spilled < spills.size() && spills[spilled].after <= tier_index; };
  // Disk writes issued before tier copy `tier_index`: their host items are final once the copies queued so
  // far have run (on CUDA they may still be in flight on the tier's stream).
  auto spills_until = [&](size_t tier_index) -> Status {
    if (!spill_due(tier_index)) return {};
    RILL_TRY(be.synchronize());
    for (; spill_due(tier_index); ++spilled) {
      const cache::DiskWrite& w = spills[spilled];
      const char* src = host->item(w.snapshot, w.host);
      if (!src) return internal_error("disk tier write of host {} {} outside the tier", w.snapshot ? "snapshot" : "block", w.host);
      disk->write(w, src, ops.disk_writes_wait);
    }
    return {};
  };
  for (size_t i = 0; i < ops.tier_copies.size();) {
    const uint32_t at = ops.tier_copies[i].after;
    RILL_TRY(slots_until(at));
    RILL_TRY(spills_until(i));
    std::vector<backend::HostCopy> batch;
    do {
      RILL_TRY(host->append_copies(caches, ops.tier_copies[i], &batch));
      ++i;
    } while (i < ops.tier_copies.size() && ops.tier_copies[i].after == at && !spill_due(i));
    const auto t0 = std::chrono::steady_clock::now();
    RILL_TRY(be.copy_host_tier_batch(batch));
    if (tier_seconds)
      *tier_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  RILL_TRY(spills_until(ops.tier_copies.size()));
  return slots_until(slot.size());
}

Result<std::unique_ptr<ModelRunner>> ModelRunner::create(std::unique_ptr<model::Model> model,
                                                         const RunnerOptions& o) {
  if (!model) return invalid_argument("runner: no model");
  if (o.max_batch_size < 1) return invalid_argument("--max-batch-size must be at least 1");
  if (o.max_num_tokens < 1) return invalid_argument("--max-num-tokens must be at least 1");
  backend::Backend& be = model->backend();
  const model::ModelConfig& c = model->config();
  int want_len =
      o.max_model_len > 0 ? o.max_model_len : int(std::min<int64_t>(c.max_position_embeddings, 1 << 30));
  if (!be.device_memory() && o.num_kv_blocks == 0 && o.max_model_len == 0)
    want_len = std::min(want_len, 8192);  // CPU without explicit limits: a modest default context
  model::StepLimits lim;
  lim.max_tokens = o.max_num_tokens;
  lim.max_seqs = o.max_batch_size;
  // Verify steps (speculative decoding) take logits at every draft position too.
  const int max_rows =
      o.max_logit_rows > 0
          ? o.max_logit_rows
          : int(std::min<int64_t>(int64_t(o.max_batch_size) * (1 + std::max(o.num_speculative_tokens, 0)),
                                  std::max(o.max_batch_size, o.max_num_tokens)));
  lim.max_logit_rows = max_rows;
  lim.max_context = want_len;
  RILL_TRY(model->reserve_workspace(lim));
  cache::PrefixCacheOptions prefix = o.prefix;
  if (!be.kda_snapshots_in_step()) prefix.staging_slots = 0;
  RILL_ASSIGN_OR_RETURN(
      cache::MemoryPlan plan,
      plan_memory(be, c, o.max_batch_size, want_len, o.kv_cache_fraction, o.num_kv_blocks, o.block_size,
                  prefix, o.gpu_memory_utilization, o.num_speculative_tokens > 0, o.kda_rollback,
                  o.num_speculative_tokens + 1));
  // Graphs pad with one state slot and one MLA block past those the cache manager hands out.
  const bool graphs = !o.enforce_eager && (be.can_capture() || !o.capture_graphs);
  const int n_slots = cache::CacheManager::state_slots_needed(plan, prefix);
  RILL_ASSIGN_OR_RETURN(model::ModelCaches caches,
                        model::ModelCaches::allocate(be, c, n_slots + (graphs ? 1 : 0),
                                                     plan.n_blocks + (graphs ? 1 : 0), plan.block_size,
                                                     {plan.n_record_slots, plan.record_tokens}));
  RILL_ASSIGN_OR_RETURN(Sampler sampler, Sampler::create(be, max_rows));
  std::unique_ptr<ModelRunner> r(new ModelRunner(std::move(model), std::move(sampler)));
  r->plan_ = plan;
  r->prefix_ = prefix;
  r->caches_ = std::move(caches);
  if (o.host_tier_bytes > 0 && prefix.enabled) {
    Result<HostTier> host = HostTier::create(be, r->caches_, o.host_tier_bytes);
    if (host.ok()) {
      r->host_ = std::move(host).value();
      r->plan_.n_host_blocks = r->host_.n_blocks;
      r->plan_.n_host_snapshots = r->host_.n_snapshots;
      r->plan_.host_block_bytes = int64_t(r->host_.block_bytes);
      r->plan_.host_snapshot_bytes = int64_t(r->host_.snapshot_bytes);
      r->plan_.pinned_host = r->host_.pinned;
    } else {
      RILL_LOG_ERROR("--kv-offloading-size {}: {}; running without the host tier (evicted prefix-cache blocks "
                     "are dropped)",
                     format_bytes(double(o.host_tier_bytes)), host.status().message());
    }
  }
  if (!o.disk_tier.dir.empty() && prefix.enabled) {
    if (!r->host_.enabled()) {
      RILL_LOG_ERROR("--kv-offloading-dir {}: the disk tier sits below the host tier, which this server runs "
                     "without; running without the disk tier", o.disk_tier.dir.string());
    } else {
      Result<std::unique_ptr<DiskTier>> disk = [&]() -> Result<std::unique_ptr<DiskTier>> {
        RILL_ASSIGN_OR_RETURN(const uint64_t fp,
                              cache_fingerprint(*r->model_, r->caches_, plan.block_size, o.model_identity));
        return DiskTier::open(o.disk_tier, fp, r->host_.block_bytes, r->host_.snapshot_bytes);
      }();
      if (disk.ok()) {
        r->disk_ = std::move(disk).value();
        r->plan_.disk_tier = true;
      } else {
        RILL_LOG_ERROR("--kv-offloading-dir {}: {}; running without the disk tier", o.disk_tier.dir.string(),
                       disk.status().message());
      }
    }
  }
  r->max_model_len_ = std::min<int>(want_len, plan.n_blocks * plan.block_size);
  if (graphs) {
    // Steps whose experts the backend runs faster eagerly than in a graph stay eager.
    int64_t max_graph_tokens = INT64_MAX;
    if (c.moe.n_experts_per_token > 0) {
      const int64_t pairs = be.graph_max_expert_pairs(c.mxfp4_experts || c.fp8.source != model::Fp8Source::None);
      if (pairs < INT64_MAX) {
        max_graph_tokens = pairs / c.moe.n_experts_per_token;
        RILL_LOG_INFO("decode graphs up to {} tokens a step (larger steps run eagerly: {} experts are faster "
                      "there)", max_graph_tokens, be.name());
      }
    }
    RILL_ASSIGN_OR_RETURN(DecodeGraphs g,
                          DecodeGraphs::create(be, o.max_batch_size, r->max_model_len_, plan.block_size,
                                               n_slots, plan.n_blocks, o.capture_graphs,
                                               1 + std::max(o.num_speculative_tokens, 0), max_graph_tokens));
    r->graphs_ = std::move(g);
  }
  return r;
}

Result<TensorView> ModelRunner::forward(const model::StepBatch& batch, const cache::CacheOps& ops) {
  tier_seconds_ = 0;
  replayed_ = false;
  RILL_TRY(apply_cache_ops(model_->backend(), caches_, ops, &host_, &tier_seconds_, disk_.get()));
  if (batch.seqs.empty()) return TensorView{};
  // The step is checked here and laid out once: padded to its bucket by the graphs, else as it is.
  RILL_TRY(model_->check_step(batch, caches_));
  if (graphs_ && graphs_->bucket(*model_, batch) > 0) {
    const uint64_t replays = graphs_->replays();
    Result<TensorView> logits = graphs_->run(*model_, caches_, batch);
    replayed_ = graphs_->replays() > replays;
    return logits;
  }
  RILL_TRY(batch.to_layout(caches_.block_size, &layout_));
  RILL_TRY(model_->prepare(batch, layout_, caches_));
  return model_->run_prepared(caches_);
}

Result<StepOutput> ModelRunner::execute(const model::StepBatch& batch, const SamplingBatch& sampling,
                                        const cache::CacheOps& ops) {
  backend::Backend& be = model_->backend();
  StepOutput out;
  RILL_ASSIGN_OR_RETURN(TensorView logits, forward(batch, ops));
  out.tier_copy_seconds = tier_seconds_;
  out.replayed = replayed_;
  if (batch.seqs.empty()) return out;
  RILL_TRY(sampler_.run(logits, sampling, &out.tokens));
  if (sampling.want_logits) {  // as the sampler left them (penalties and masks work in place)
    out.vocab = logits.size(1);
    out.logits.resize(static_cast<size_t>(logits.numel()));
    RILL_TRY(be.copy_to_host(out.logits.data(), logits.data, logits.nbytes()));
  }
  return out;
}

std::vector<bool> ModelRunner::load_from_disk(const std::vector<cache::DiskLoad>& loads) {
  std::vector<bool> ok(loads.size(), false);
  if (!disk_ || loads.empty()) return ok;
  // The host ids may still be read by copies to the device queued before (CUDA: in flight).
  if (Status st = model_->backend().synchronize(); !st.ok()) {
    RILL_LOG_ERROR("disk tier: {}; its items are computed instead", st.message());
    return ok;
  }
  // The hit's files at once, on the disk tier's readers: one file after another left the disk mostly idle.
  std::vector<DiskTier::ReadItem> items;
  std::vector<size_t> of;  // items[j] is loads[of[j]]
  for (size_t i = 0; i < loads.size(); ++i)
    if (char* dst = host_.item(loads[i].snapshot, loads[i].host)) {
      items.push_back({loads[i].snapshot, loads[i].hash, dst});
      of.push_back(i);
    }
  const std::vector<Status> st = disk_->read_all(items);
  for (size_t j = 0; j < items.size(); ++j) ok[of[j]] = st[j].ok();
  return ok;
}

std::unique_ptr<model::Model> ModelRunner::release_model() {
  disk_.reset();
  graphs_.reset();
  caches_ = {};
  host_ = {};
  return std::move(model_);
}

}  // namespace rill::runner
