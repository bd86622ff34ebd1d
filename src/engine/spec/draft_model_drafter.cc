#include "engine/spec/draft_model_drafter.h"

#include "runner/executor.h"

namespace rill::engine::spec {

std::vector<int32_t> DraftModelDrafter::propose(std::span<const int32_t> context, int max_tokens) const {
  const DraftQuery q{context, max_tokens};
  return std::move(propose_batch({&q, 1}).front());
}

std::vector<std::vector<int32_t>> DraftModelDrafter::propose_batch(
    std::span<const DraftQuery> queries) const {
  std::vector<runner::DraftRequest> requests;
  requests.reserve(queries.size());
  for (const DraftQuery& q : queries) requests.push_back({q.context, q.max_tokens});
  return executor_->propose_drafts(requests);
}

}  // namespace rill::engine::spec
