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
  // `eos_ids`: the model's end-of-sequence ids, masked with a request's stop ids before its min_tokens.
  static Result<Sampler> create(backend::Backend& be, int max_rows, std::vector<int32_t> eos_ids);
  // logits [R, V] rows in the order of `seqs`.
  Status run(TensorView logits, const std::vector<const Sequence*>& seqs, std::vector<SampledToken>* out);

 private:
  Sampler(backend::Backend& be, int max_rows, std::vector<int32_t> eos_ids)
      : be_(&be), max_rows_(max_rows), eos_ids_(std::move(eos_ids)) {}
  Status ensure_penalty_capacity(size_t n_tokens);
  bool masks_logits(const Sequence& s) const;
  void row_mask(const Sequence& s, std::span<uint32_t> mask);
  Status apply_token_masks(TensorView logits, const std::vector<const Sequence*>& seqs);

  backend::Backend* be_;
  int max_rows_;
  std::vector<int32_t> eos_ids_;
  backend::DeviceAllocation rows_, ids_, lp_, top_ids_, top_lp_, pen_offsets_, pen_params_;
  backend::DeviceAllocation pen_tokens_, pen_counts_;
  size_t pen_capacity_ = 0;
  backend::DeviceAllocation mask_;  // [rows, words] token masks, allocated at the first masked step
  std::vector<uint32_t> host_mask_, narrowed_;
  Arena scratch_;
  backend::DeviceAllocation scratch_mem_;
};

}  // namespace rill::engine
