// SequenceSession: one sequence run directly on a Model with caches of its own — the engine-free path used
// by `rill generate`, `rill logits` and the model tests. (The serving engine schedules many sequences
// through the same Model::forward.)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"

namespace rill::model {

class SequenceSession {
 public:
  // Caches for one sequence of up to `max_context` tokens; the model's workspace must already be reserved.
  static Result<SequenceSession> create(Model& model, int max_context);

  // Appends `ids` in chunks of at most `chunk` tokens (0 = the workspace limit). Returns the F32 logits on the
  // host: of every fed position when `all_logits`, else of the last one; [rows * vocab] row-major.
  Result<std::vector<float>> feed(std::span<const int32_t> ids, int chunk, bool all_logits);

  // Samples the next token from the last position's logits (which `feed` must have produced).
  Result<int32_t> sample(const backend::SamplingRow& row);

  int position() const { return position_; }

 private:
  SequenceSession(Model& m, ModelCaches caches) : model_(&m), caches_(std::move(caches)) {}
  Model* model_;
  ModelCaches caches_;
  int position_ = 0;
  TensorView last_logits_;  // device view of the last row, valid until the next forward
};

}  // namespace rill::model
