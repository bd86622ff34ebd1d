#include "engine/spec/draft_model_drafter.h"

#include <algorithm>

#include "core/log.h"

namespace rill::engine::spec {

EngineOptions draft_engine_options(const EngineOptions& target) {
  EngineOptions d;
  d.max_batch_size = target.max_batch_size;
  d.max_num_tokens = target.max_num_tokens;
  d.max_model_len = target.max_model_len;
  d.block_size = target.block_size;
  d.num_kv_blocks = target.num_kv_blocks > 0 ? 2 * target.num_kv_blocks : 0;
  d.kv_cache_fraction = kDraftKvCacheFraction;
  d.enable_prefix_caching = true;
  d.kda_snapshot_interval = d.block_size;
  d.kda_snapshot_budget_mib = std::min(target.kda_snapshot_budget_mib, kDraftSnapshotBudgetMib);
  d.enforce_eager = target.enforce_eager;
  d.capture_graphs = target.capture_graphs;
  d.max_queue = std::max(target.max_queue, target.max_batch_size);
  return d;
}

DraftModelDrafter::DraftModelDrafter(std::unique_ptr<Engine> draft_engine) : engine_(std::move(draft_engine)) {}

DraftModelDrafter::~DraftModelDrafter() = default;

std::vector<int32_t> DraftModelDrafter::propose(std::span<const int32_t> context, int max_tokens) const {
  const DraftQuery q{context, max_tokens};
  return std::move(propose_batch({&q, 1}).front());
}

// Every query is submitted before any answer is read, so the draft engine batches them like any concurrent
// requests: their re-prefills share steps, then one decode step per draft token serves them all.
std::vector<std::vector<int32_t>> DraftModelDrafter::propose_batch(std::span<const DraftQuery> queries) const {
  std::vector<std::vector<int32_t>> out(queries.size());
  std::vector<std::shared_ptr<RequestStream>> streams(queries.size());
  for (size_t i = 0; i < queries.size(); ++i) {
    const DraftQuery& q = queries[i];
    if (q.max_tokens <= 0 || q.context.empty()) continue;
    Request r;
    r.prompt.assign(q.context.begin(), q.context.end());
    r.params.temperature = 0;
    r.params.max_tokens = q.max_tokens;
    r.params.ignore_eos = true;
    auto stream = engine_->submit(std::move(r));
    if (stream.ok()) streams[i] = *stream;  // else (e.g. past the draft engine's context): no drafts
  }
  for (size_t i = 0; i < queries.size(); ++i) {
    if (!streams[i]) continue;
    std::vector<int32_t>& got = out[i];
    StreamEvent ev;
    bool done = false;
    while (!done && streams[i]->next(&ev, std::chrono::minutes(10))) {
      got.insert(got.end(), ev.token_ids.begin(), ev.token_ids.end());
      if (!ev.finish) continue;
      done = true;
      if (*ev.finish == FinishReason::Error) {
        RILL_LOG_WARN("draft model: {}; no drafts for this step", ev.error.message());
        got.clear();
      }
    }
    if (!done) {
      RILL_LOG_WARN("draft model: no answer in 10 minutes; no drafts for this step");
      engine_->cancel(streams[i]->id());
      got.clear();
    }
    if (int(got.size()) > queries[i].max_tokens) got.resize(size_t(queries[i].max_tokens));
  }
  return out;
}

}  // namespace rill::engine::spec
