// Sampler: turns one step's logits into tokens on the device — penalties, sampling, logprobs — with only the
// sampled ids (and requested logprobs) copied back. Owns small device buffers sized at start-up.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "engine/sequence.h"

namespace rill::engine {

struct SampledToken {
  int32_t id = 0;
  TokenLogprob logprob;  // filled when requested
};

class Sampler {
 public:
  static Result<Sampler> create(backend::Backend& be, int max_rows);
  // logits [R, V] rows in the order of `seqs`.
  Status run(TensorView logits, const std::vector<const Sequence*>& seqs, std::vector<SampledToken>* out);

 private:
  Sampler(backend::Backend& be, int max_rows) : be_(&be), max_rows_(max_rows) {}
  Status ensure_penalty_capacity(size_t n_tokens);
  Status apply_constraints(TensorView logits, const std::vector<const Sequence*>& seqs);

  backend::Backend* be_;
  int max_rows_;
  backend::DeviceAllocation rows_, ids_, lp_, top_ids_, top_lp_, pen_offsets_, pen_params_;
  backend::DeviceAllocation pen_tokens_, pen_counts_;
  size_t pen_capacity_ = 0;
  backend::DeviceAllocation mask_;    // [rows, words] grammar masks, allocated at the first constrained step
  std::vector<uint32_t> host_mask_;
  Arena scratch_;
  backend::DeviceAllocation scratch_mem_;
};

}  // namespace rill::engine
