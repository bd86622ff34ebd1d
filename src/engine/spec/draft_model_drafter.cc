#include "engine/spec/draft_model_drafter.h"

#include "core/log.h"
#include "engine/engine.h"

namespace rill::engine::spec {

DraftModelDrafter::DraftModelDrafter(std::unique_ptr<Engine> draft_engine) : engine_(std::move(draft_engine)) {}

DraftModelDrafter::~DraftModelDrafter() = default;

std::vector<int32_t> DraftModelDrafter::propose(std::span<const int32_t> context, int max_tokens) const {
  if (max_tokens <= 0 || context.empty()) return {};
  Request r;
  r.prompt.assign(context.begin(), context.end());
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  auto stream = engine_->submit(std::move(r));
  if (!stream.ok()) return {};  // e.g. past the draft engine's context: no drafts for this step
  std::vector<int32_t> out;
  StreamEvent ev;
  while ((*stream)->next(&ev, std::chrono::minutes(10))) {
    out.insert(out.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (!ev.finish) continue;
    if (*ev.finish == FinishReason::Error) {
      RILL_LOG_WARN("draft model: {}; no drafts for this step", ev.error.message());
      return {};
    }
    if (int(out.size()) > max_tokens) out.resize(size_t(max_tokens));
    return out;
  }
  RILL_LOG_WARN("draft model: no answer in 10 minutes; no drafts for this step");
  engine_->cancel((*stream)->id());
  return {};
}

}  // namespace rill::engine::spec
