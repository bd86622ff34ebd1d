#include "runner/executor_session.h"

#include <algorithm>
#include <numeric>

namespace rill::runner {

RunnerOptions scoring_runner_options(int max_context, int chunk) {
  RunnerOptions o;
  o.max_batch_size = 1;
  o.max_num_tokens = std::max(1, std::min({chunk > 0 ? chunk : max_context, max_context, 4096}));
  o.max_logit_rows = o.max_num_tokens;
  o.max_model_len = max_context;
  o.num_kv_blocks = std::max(1, (max_context + o.block_size - 1) / o.block_size);
  o.enforce_eager = true;
  o.prefix.enabled = false;
  return o;
}

Result<ExecutorSession> ExecutorSession::create(Executor& ex, int max_context) {
  const cache::MemoryPlan& plan = ex.memory_plan();
  if (int64_t(plan.n_blocks) * plan.block_size < max_context)
    return out_of_range("a sequence of {} tokens needs {} cache blocks of {}; the executor planned {}", max_context,
                        (max_context + plan.block_size - 1) / plan.block_size, plan.block_size, plan.n_blocks);
  if (ex.max_model_len() < max_context)
    return out_of_range("a sequence of {} tokens is longer than the executor's {} positions", max_context,
                        ex.max_model_len());
  return ExecutorSession(ex, max_context);
}

Result<std::vector<float>> ExecutorSession::feed(std::span<const int32_t> ids, int chunk) {
  const model::Model& m = ex_->model();
  const int limit = std::min(m.limits().max_tokens, m.limits().max_logit_rows);
  chunk = chunk <= 0 ? limit : std::min(chunk, limit);
  if (position_ + int64_t(ids.size()) > max_context_)
    return out_of_range("sequence of {} tokens exceeds the session's context of {}", position_ + ids.size(),
                        max_context_);
  const int block = ex_->memory_plan().block_size;
  std::vector<float> out;
  for (size_t off = 0; off < ids.size(); off += size_t(chunk)) {
    const int n = int(std::min(ids.size() - off, size_t(chunk)));
    model::StepBatch b;
    b.token_ids.assign(ids.begin() + off, ids.begin() + off + n);
    model::SequenceStep s;
    s.start_pos = position_;
    s.n_new = n;
    s.state_slot = 0;
    s.block_table.resize(size_t((position_ + n + block - 1) / block));
    std::iota(s.block_table.begin(), s.block_table.end(), 0);
    s.logits = model::LogitsNeeded::All;
    b.seqs.push_back(std::move(s));
    SamplingBatch sampling;
    sampling.rows.resize(size_t(n));  // greedy, no penalties, no masks: the logits stay as computed
    sampling.want_logits = true;
    RILL_ASSIGN_OR_RETURN(StepOutput step, ex_->execute(b, sampling, cache::CacheOps{}));
    if (step.logits.size() != size_t(n) * size_t(step.vocab))
      return internal_error("step returned {} logits for {} rows of {} ids", step.logits.size(), n, step.vocab);
    out.insert(out.end(), step.logits.begin(), step.logits.end());
    position_ += n;
  }
  return out;
}

}  // namespace rill::runner
