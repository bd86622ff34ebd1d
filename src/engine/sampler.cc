#include "engine/sampler.h"

#include <algorithm>

#include "backend/sampling.h"

namespace rill::engine {

Result<Sampler> Sampler::create(backend::Backend& be, int max_rows, std::vector<int32_t> eos_ids) {
  Sampler s(be, max_rows, std::move(eos_ids));
  const size_t R = size_t(max_rows);
  RILL_ASSIGN_OR_RETURN(s.rows_, be.allocate(R * sizeof(backend::SamplingRow)));
  RILL_ASSIGN_OR_RETURN(s.ids_, be.allocate(R * 4));
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

namespace {

void set_bit(std::span<uint32_t> mask, int32_t t) {
  mask[size_t(t) / 32] |= 1u << (t % 32);
}
void clear_bit(std::span<uint32_t> mask, int32_t t) {
  mask[size_t(t) / 32] &= ~(1u << (t % 32));
}
bool test_bit(std::span<const uint32_t> mask, int32_t t) {
  return (mask[size_t(t) / 32] >> (t % 32)) & 1u;
}

// `mask` becomes `narrowed`, unless that would leave nothing to sample.
void narrow_to(std::span<uint32_t> mask, const std::vector<uint32_t>& narrowed) {
  if (std::any_of(narrowed.begin(), narrowed.end(), [](uint32_t w) { return w != 0; }))
    std::copy(narrowed.begin(), narrowed.end(), mask.begin());
}

}  // namespace

// A row is masked for a grammar, for allowed_token_ids, and before min_tokens (its stop ids).
bool Sampler::masks_logits(const Sequence& s) const {
  return s.constraint || !s.params.allowed_token_ids.empty() || s.n_generated() < s.params.min_tokens;
}

// One row's mask (all ones on entry): the grammar's tokens, narrowed to allowed_token_ids, less the stop ids
// (and EOS unless ignore_eos) while fewer than min_tokens are generated (vLLM's min-tokens logits processor).
// A narrowing that would leave nothing is skipped: a complete grammar may allow only its end (stop) ids.
void Sampler::row_mask(const Sequence& s, std::span<uint32_t> mask) {
  if (s.constraint) {
    // Computed for the current state off the engine thread (the scheduler only lets it sample once ready);
    // ids past the constraint's words stay off, like those past a grammar's vocabulary.
    const std::span<const uint32_t> words = s.constraint->words();
    std::fill(mask.begin(), mask.end(), 0u);
    std::copy_n(words.begin(), std::min(words.size(), mask.size()), mask.begin());
  }
  const int64_t n_ids = int64_t(mask.size()) * 32;
  auto in_mask = [&](int32_t t) { return t >= 0 && t < n_ids; };
  if (!s.params.allowed_token_ids.empty()) {
    narrowed_.assign(mask.size(), 0u);
    for (int32_t t : s.params.allowed_token_ids)
      if (in_mask(t) && test_bit(mask, t)) set_bit(narrowed_, t);
    narrow_to(mask, narrowed_);
  }
  if (s.n_generated() < s.params.min_tokens) {
    narrowed_.assign(mask.begin(), mask.end());
    for (int32_t t : s.params.stop_token_ids)
      if (in_mask(t)) clear_bit(narrowed_, t);
    if (!s.params.ignore_eos)
      for (int32_t t : eos_ids_)
        if (in_mask(t)) clear_bit(narrowed_, t);
    narrow_to(mask, narrowed_);
  }
}

// Token masks: the host builds each masked row's mask (a grammar's, computed by the mask pool while the
// model ran, narrowed here) and the device sets the rest to -inf after penalties.
Status Sampler::apply_token_masks(TensorView logits, const std::vector<const Sequence*>& seqs) {
  const int64_t R = int64_t(seqs.size()), V = logits.size(1), W = (V + 31) / 32;
  const size_t bytes = size_t(max_rows_ * W) * 4;
  if (mask_.size() < bytes) {
    RILL_TRY(be_->synchronize());
    RILL_ASSIGN_OR_RETURN(mask_, be_->allocate(bytes));
  }
  host_mask_.assign(size_t(R * W), ~0u);
  for (int64_t r = 0; r < R; ++r)
    if (masks_logits(*seqs[size_t(r)]))
      row_mask(*seqs[size_t(r)], std::span(host_mask_).subspan(size_t(r * W), size_t(W)));
  RILL_TRY(be_->upload_async(mask_.data(), host_mask_.data(), host_mask_.size() * 4));
  return be_->mask_logits({logits, static_cast<const uint32_t*>(mask_.data()), W});
}

Status Sampler::run(TensorView logits, const std::vector<const Sequence*>& seqs, std::vector<SampledToken>* out) {
  const int64_t R = int64_t(seqs.size());
  out->assign(static_cast<size_t>(R), {});
  if (R == 0) return {};
  if (R > max_rows_) return internal_error("sampler: {} rows, capacity {}", R, max_rows_);
  const int64_t V = logits.size(1);

  // Penalties, only when some row asks for them.
  if (std::any_of(seqs.begin(), seqs.end(), [](const Sequence* s) { return s->uses_penalties(); })) {
    std::vector<int32_t> offsets{0}, tokens, counts;
    std::vector<float> params;
    for (const Sequence* s : seqs) {
      if (s->uses_penalties()) {
        for (const auto& [t, n] : s->output_counts) tokens.push_back(t), counts.push_back(n);
        if (s->params.repetition_penalty != 1.0f)
          for (int32_t t : s->prompt_tokens)
            if (!s->output_counts.count(t)) tokens.push_back(t), counts.push_back(0);
      }
      offsets.push_back(int32_t(tokens.size()));
      params.insert(params.end(), {s->params.presence_penalty, s->params.frequency_penalty, s->params.repetition_penalty});
    }
    RILL_TRY(ensure_penalty_capacity(tokens.size()));
    RILL_TRY(be_->upload_async(pen_offsets_.data(), offsets.data(), offsets.size() * 4));
    RILL_TRY(be_->upload_async(pen_params_.data(), params.data(), params.size() * 4));
    RILL_TRY(be_->upload_async(pen_tokens_.data(), tokens.data(), tokens.size() * 4));
    RILL_TRY(be_->upload_async(pen_counts_.data(), counts.data(), counts.size() * 4));
    RILL_TRY(be_->apply_penalties({logits, static_cast<const int32_t*>(pen_offsets_.data()),
                                   static_cast<const int32_t*>(pen_tokens_.data()),
                                   static_cast<const int32_t*>(pen_counts_.data()),
                                   static_cast<const float*>(pen_params_.data())}));
  }

  if (std::any_of(seqs.begin(), seqs.end(), [&](const Sequence* s) { return masks_logits(*s); }))
    RILL_TRY(apply_token_masks(logits, seqs));

  std::vector<backend::SamplingRow> rows;
  for (const Sequence* s : seqs) {
    const SamplingParams& p = s->params;
    rows.push_back({p.temperature, p.top_p, p.min_p, p.top_k, s->seed, uint64_t(s->n_generated())});
  }
  RILL_TRY(be_->upload_async(rows_.data(), rows.data(), rows.size() * sizeof(backend::SamplingRow)));
  const TensorView ids = TensorView::make(ids_.data(), DType::I32, {R}, be_->device());
  // Sampling scratch (CUB sorts on the GPU) is sized on first use by a dry run and kept.
  backend::SampleArgs sa{logits, static_cast<const backend::SamplingRow*>(rows_.data()), ids, nullptr,
                         std::all_of(rows.begin(), rows.end(), backend::is_greedy)};
  {
    Arena measure(nullptr, 0, be_->device());
    sa.scratch = &measure;
    be_->set_dry_run(true);
    const Status st = be_->sample(sa);
    be_->set_dry_run(false);
    RILL_TRY(st);
    if (measure.high_water() > scratch_.capacity()) {
      RILL_TRY(be_->synchronize());
      RILL_ASSIGN_OR_RETURN(scratch_mem_, be_->allocate(measure.high_water() * 2));
      scratch_ = Arena(scratch_mem_.data(), scratch_mem_.size(), be_->device());
    }
  }
  scratch_.reset();
  sa.scratch = &scratch_;
  RILL_TRY(be_->sample(sa));

  int top_n = -1;
  for (const Sequence* s : seqs) top_n = std::max(top_n, s->params.logprobs);
  std::vector<float> lp(static_cast<size_t>(R)), top_lp;
  std::vector<int32_t> top_ids;
  if (top_n >= 0) {
    backend::LogprobsArgs la{logits, ids, top_n, TensorView::make(lp_.data(), DType::F32, {R}, be_->device())};
    if (top_n > 0) {
      la.out_top_ids = TensorView::make(top_ids_.data(), DType::I32, {R, top_n}, be_->device());
      la.out_top_logprobs = TensorView::make(top_lp_.data(), DType::F32, {R, top_n}, be_->device());
    }
    RILL_TRY(be_->logprobs(la));
  }
  std::vector<int32_t> host_ids(static_cast<size_t>(R));
  RILL_TRY(be_->copy_to_host(host_ids.data(), ids_.data(), size_t(R) * 4));
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
    t.id = host_ids[size_t(r)];
    if (t.id < 0 || t.id >= V) return internal_error("sampler produced token {} outside [0, {})", t.id, V);
    const int want = seqs[size_t(r)]->params.logprobs;
    if (want < 0) continue;
    t.logprob.id = t.id;
    t.logprob.logprob = lp[size_t(r)];
    for (int k = 0; k < want; ++k)
      t.logprob.top.push_back({top_ids[size_t(r * top_n + k)], top_lp[size_t(r * top_n + k)]});
  }
  return {};
}

}  // namespace rill::engine
