#include "runner/sampler.h"

#include <algorithm>
#include <limits>

#include "backend/sampling.h"

namespace rill::runner {

Result<Sampler> Sampler::create(backend::Backend& be, int max_rows) {
  Sampler s(be, max_rows);
  const size_t R = size_t(max_rows);
  RILL_ASSIGN_OR_RETURN(s.rows_, be.allocate(R * sizeof(backend::SamplingRow)));
  RILL_ASSIGN_OR_RETURN(s.ids_, be.allocate(R * 4));
  RILL_ASSIGN_OR_RETURN(s.nonfinite_, be.allocate(R * 4));
  RILL_ASSIGN_OR_RETURN(s.lp_, be.allocate(R * 4));
  RILL_ASSIGN_OR_RETURN(s.top_ids_, be.allocate(R * 20 * 4));
  RILL_ASSIGN_OR_RETURN(s.top_lp_, be.allocate(R * 20 * 4));
  RILL_ASSIGN_OR_RETURN(s.pen_offsets_, be.allocate((R + 1) * 4));
  RILL_ASSIGN_OR_RETURN(s.pen_params_, be.allocate(R * 3 * 4));
  RILL_TRY(s.ensure_penalty_capacity(static_cast<size_t>(4096) * std::min<size_t>(R, 64)));
  return s;
}

// Grows the penalty token buffers (the only allocation a step can make, and only for penalised requests
// with more distinct tokens than any before).
Status Sampler::ensure_penalty_capacity(size_t n) {
  if (n <= pen_capacity_) return {};
  RILL_TRY(be_->synchronize());
  pen_capacity_ = std::max(n, pen_capacity_ * 2);
  RILL_ASSIGN_OR_RETURN(pen_tokens_, be_->allocate(pen_capacity_ * 4));
  RILL_ASSIGN_OR_RETURN(pen_counts_, be_->allocate(pen_capacity_ * 4));
  return {};
}

// Penalties (vLLM order, on the raw logits): each penalised row's distinct tokens with their output counts
// (0 for prompt-only tokens, which only the repetition penalty sees).
Status Sampler::apply_penalties(TensorView logits, const SamplingBatch& batch) {
  std::vector<int32_t> offsets{0}, tokens, counts;
  std::vector<float> params;
  for (const RowSampling& r : batch.rows) {
    if (r.uses_penalties()) {
      if (r.output_counts)
        for (const auto& [t, n] : *r.output_counts) tokens.push_back(t), counts.push_back(n);
      if (r.repetition_penalty != 1.0f && r.prompt_tokens)
        for (int32_t t : *r.prompt_tokens)
          if (!r.output_counts || !r.output_counts->count(t)) tokens.push_back(t), counts.push_back(0);
    }
    offsets.push_back(int32_t(tokens.size()));
    params.insert(params.end(), {r.presence_penalty, r.frequency_penalty, r.repetition_penalty});
  }
  RILL_TRY(ensure_penalty_capacity(tokens.size()));
  RILL_TRY(be_->upload_async(pen_offsets_.data(), offsets.data(), offsets.size() * 4));
  RILL_TRY(be_->upload_async(pen_params_.data(), params.data(), params.size() * 4));
  RILL_TRY(be_->upload_async(pen_tokens_.data(), tokens.data(), tokens.size() * 4));
  RILL_TRY(be_->upload_async(pen_counts_.data(), counts.data(), counts.size() * 4));
  return be_->apply_penalties({logits, static_cast<const int32_t*>(pen_offsets_.data()),
                               static_cast<const int32_t*>(pen_tokens_.data()),
                               static_cast<const int32_t*>(pen_counts_.data()),
                               static_cast<const float*>(pen_params_.data())});
}

// Token masks: built by the caller on the host; the device sets every masked-off logit to -inf (after the
// penalties).
Status Sampler::apply_token_masks(TensorView logits, const SamplingBatch& batch) {
  const int64_t R = int64_t(batch.rows.size()), W = batch.words_per_row;
  if (W < (logits.size(1) + 31) / 32 || int64_t(batch.mask.size()) != R * W)
    return internal_error("sampler: token masks of {} words for {} rows of {} tokens ({} words per row)",
                          batch.mask.size(), R, logits.size(1), W);
  const size_t bytes = size_t(max_rows_ * W) * 4;
  if (mask_.size() < bytes) {
    RILL_TRY(be_->synchronize());
    RILL_ASSIGN_OR_RETURN(mask_, be_->allocate(bytes));
  }
  RILL_TRY(be_->upload_async(mask_.data(), batch.mask.data(), batch.mask.size() * 4));
  return be_->mask_logits({logits, static_cast<const uint32_t*>(mask_.data()), W});
}

Status Sampler::run(TensorView logits, const SamplingBatch& batch, std::vector<SampledToken>* out) {
  const int64_t R = int64_t(batch.rows.size());
  out->assign(static_cast<size_t>(R), {});
  if (R == 0) return {};
  if (R > max_rows_) return internal_error("sampler: {} rows, capacity {}", R, max_rows_);
  if (logits.size(0) != R)
    return internal_error("sampler: {} sampling rows for {} logits rows", R, logits.size(0));
  const int64_t V = logits.size(1);
  const auto& rs = batch.rows;

  // Non-finite logits are checked raw: the penalties and masks below write -inf, and a NaN row would
  // otherwise sample whatever the comparisons happen to pick, through a grammar mask or not.
  std::vector<float> nan_row;
  for (int64_t r = 0; r < R; ++r)
    if (rs[size_t(r)].poison_logits) {
      nan_row.assign(size_t(V), std::numeric_limits<float>::quiet_NaN());
      RILL_TRY(be_->upload_async(static_cast<float*>(logits.data) + r * logits.stride(0), nan_row.data(),
                                 size_t(V) * 4));
    }
  const TensorView nonfinite = TensorView::make(nonfinite_.data(), DType::I32, {R}, be_->device());
  RILL_TRY(be_->nonfinite_rows({logits, nonfinite}));

  if (std::any_of(rs.begin(), rs.end(), [](const RowSampling& r) { return r.uses_penalties(); }))
    RILL_TRY(apply_penalties(logits, batch));
  if (std::any_of(rs.begin(), rs.end(), [](const RowSampling& r) { return r.masked; }))
    RILL_TRY(apply_token_masks(logits, batch));

  std::vector<backend::SamplingRow> rows;
  for (const RowSampling& r : rs) rows.push_back(r.draw);
  RILL_TRY(be_->upload_async(rows_.data(), rows.data(), rows.size() * sizeof(backend::SamplingRow)));
  const TensorView ids = TensorView::make(ids_.data(), DType::I32, {R}, be_->device());
  // Sampling scratch (CUB sorts on the GPU): the backend's const query sizes it; grown when a step needs more
  // than any before, and kept.
  backend::SampleArgs sa{logits, static_cast<const backend::SamplingRow*>(rows_.data()), ids, nullptr,
                         std::all_of(rows.begin(), rows.end(), backend::is_greedy)};
  if (const size_t need = Arena::footprint(be_->sample_scratch_bytes(sa)); need > scratch_.capacity()) {
    RILL_TRY(be_->synchronize());
    RILL_ASSIGN_OR_RETURN(scratch_mem_, be_->allocate(need * 2));
    scratch_ = Arena(scratch_mem_.data(), scratch_mem_.size(), be_->device());
  }
  scratch_.reset();
  sa.scratch = &scratch_;
  RILL_TRY(be_->sample(sa));

  int top_n = -1;
  for (const RowSampling& r : rs) top_n = std::max(top_n, r.logprobs);
  std::vector<float> lp(static_cast<size_t>(R)), top_lp;
  std::vector<int32_t> top_ids;
  if (top_n >= 0) {
    backend::LogprobsArgs la{logits, ids, top_n,
                             TensorView::make(lp_.data(), DType::F32, {R}, be_->device())};
    if (top_n > 0) {
      la.out_top_ids = TensorView::make(top_ids_.data(), DType::I32, {R, top_n}, be_->device());
      la.out_top_logprobs = TensorView::make(top_lp_.data(), DType::F32, {R, top_n}, be_->device());
    }
    RILL_TRY(be_->logprobs(la));
  }
  std::vector<int32_t> host_ids(static_cast<size_t>(R));
  std::vector<int32_t> host_nonfinite(static_cast<size_t>(R));
  RILL_TRY(be_->copy_to_host(host_ids.data(), ids_.data(), size_t(R) * 4));
  RILL_TRY(be_->copy_to_host(host_nonfinite.data(), nonfinite_.data(), size_t(R) * 4));
  if (top_n >= 0) {
    RILL_TRY(be_->copy_to_host(lp.data(), lp_.data(), size_t(R) * 4));
    if (top_n > 0) {
      top_ids.resize(static_cast<size_t>(R * top_n));
      top_lp.resize(static_cast<size_t>(R * top_n));
      RILL_TRY(be_->copy_to_host(top_ids.data(), top_ids_.data(), top_ids.size() * 4));
      RILL_TRY(be_->copy_to_host(top_lp.data(), top_lp_.data(), top_lp.size() * 4));
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    SampledToken& t = (*out)[size_t(r)];
    if (host_nonfinite[size_t(r)]) {
      t.nonfinite = true;
      continue;
    }
    t.id = host_ids[size_t(r)];
    if (t.id < 0 || t.id >= V) return internal_error("sampler produced token {} outside [0, {})", t.id, V);
    const int want = rs[size_t(r)].logprobs;
    if (want < 0) continue;
    t.logprob = lp[size_t(r)];
    for (int k = 0; k < want; ++k)
      t.top.push_back({top_ids[size_t(r * top_n + k)], top_lp[size_t(r * top_n + k)]});
  }
  return {};
}

}  // namespace rill::runner
