#include "engine/step_sampling.h"

#include <algorithm>

namespace rill::engine {
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
bool StepSampling::masks_logits(const Row& r) const {
  const Sequence& s = *r.seq;
  return s.constraint || !s.params.allowed_token_ids.empty() || r.n_generated() < s.params.min_tokens;
}

// One row's mask (all ones on entry): the grammar's tokens, narrowed to allowed_token_ids, less the stop ids
// (and EOS unless ignore_eos) while fewer than min_tokens are generated (vLLM's min-tokens logits processor).
// A narrowing that would leave nothing is skipped: a complete grammar may allow only its end (stop) ids.
void StepSampling::row_mask(const Row& r, std::span<uint32_t> mask) {
  const Sequence& s = *r.seq;
  if (s.constraint) {
    // Computed for the current state off the engine thread (the scheduler only lets it sample once ready);
    // ids past the constraint's words stay off, like those past a grammar's vocabulary.
    // Row j of a verify step: the mask after drafts d_1..d_j, computed on a fork with the current one.
    const size_t j = r.drafts.size();
    const std::span<const uint32_t> words = j == 0 ? s.constraint->words() : s.constraint->draft_words(j - 1);
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
  if (r.n_generated() < s.params.min_tokens) {
    narrowed_.assign(mask.begin(), mask.end());
    for (int32_t t : s.params.stop_token_ids)
      if (in_mask(t)) clear_bit(narrowed_, t);
    if (!s.params.ignore_eos)
      for (int32_t t : eos_ids_)
        if (in_mask(t)) clear_bit(narrowed_, t);
    narrow_to(mask, narrowed_);
  }
}

runner::SamplingBatch StepSampling::make(const std::vector<Row>& rows, bool want_logits) {
  runner::SamplingBatch b;
  b.want_logits = want_logits;
  draft_counts_.clear();
  const bool any_mask = std::any_of(rows.begin(), rows.end(), [&](const Row& r) { return masks_logits(r); });
  if (any_mask) {
    b.words_per_row = (vocab_ + 31) / 32;
    b.mask.assign(rows.size() * size_t(b.words_per_row), ~0u);
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    const Sequence& s = *rows[r].seq;
    const SamplingParams& p = s.params;
    runner::RowSampling row;
    // The draw of output position n_generated (+ the drafts before it): the counter a step per token uses
    // there, so a seeded request draws the same numbers with and without speculation (spec/acceptance.h).
    row.draw = {p.temperature, p.top_p, p.min_p, p.top_k, s.seed, uint64_t(rows[r].n_generated())};
    row.presence_penalty = p.presence_penalty;
    row.frequency_penalty = p.frequency_penalty;
    row.repetition_penalty = p.repetition_penalty;
    row.output_counts = &s.output_counts;
    if (!rows[r].drafts.empty() && s.uses_penalties()) {
      // The counts the step per token at this position would see: the drafts before it are output then.
      std::map<int32_t, int32_t>& counts = draft_counts_.emplace_back(s.output_counts);
      for (int32_t d : rows[r].drafts) counts[d]++;
      row.output_counts = &counts;
    }
    row.prompt_tokens = &s.prompt_tokens;
    row.logprobs = p.logprobs;
    if (any_mask && masks_logits(rows[r])) {
      row.masked = true;
      row_mask(rows[r], std::span(b.mask).subspan(r * size_t(b.words_per_row), size_t(b.words_per_row)));
    }
    b.rows.push_back(row);
  }
  return b;
}

}  // namespace rill::engine
