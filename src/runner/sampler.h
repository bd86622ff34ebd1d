// Sampler: turns one step's logits into tokens on the device — penalties, token masks, sampling, logprobs —
// with only the sampled ids (and requested logprobs) copied back. Owns small device buffers sized at
// start-up.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "runner/step_io.h"

namespace rill::runner {

class Sampler {
 public:
  static Result<Sampler> create(backend::Backend& be, int max_rows);
  // logits [R, V], one row per batch.rows entry. A row whose logits are not all finite comes back with
  // SampledToken::nonfinite set (the step goes on for the other rows).
  Status run(TensorView logits, const SamplingBatch& batch, std::vector<SampledToken>* out);

 private:
  Sampler(backend::Backend& be, int max_rows) : be_(&be), max_rows_(max_rows) {}
  Status ensure_penalty_capacity(size_t n_tokens);
  Status apply_penalties(TensorView logits, const SamplingBatch& batch);
  Status apply_token_masks(TensorView logits, const SamplingBatch& batch);

  backend::Backend* be_;
  int max_rows_;
  backend::DeviceAllocation rows_, ids_, nonfinite_, lp_, top_ids_, top_lp_, pen_offsets_, pen_params_;
  backend::DeviceAllocation pen_tokens_, pen_counts_;
  size_t pen_capacity_ = 0;
  backend::DeviceAllocation mask_;  // [rows, words] token masks, allocated at the first masked step
  Arena scratch_;
  backend::DeviceAllocation scratch_mem_;
};

}  // namespace rill::runner
