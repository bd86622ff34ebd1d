// The sampling rule every backend implements (the CPU one is this function): greedy when temperature <= 0
// (ties -> lowest id); otherwise softmax(logits / T), keep the top_k most likely, then the smallest prefix of
// the probability-sorted tokens whose mass reaches top_p, then drop tokens below min_p * p_max, renormalise,
// and pick by inverse CDF over that sorted order with u = uniform01(seed, counter).
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace rill::backend {

// A row that always takes the argmax (temperature <= 0, or top_k == 1).
inline bool is_greedy(const SamplingRow& row) { return row.temperature <= 0.0f || row.top_k == 1; }

int32_t sample_row(const float* logits, int32_t vocab, const SamplingRow& row);

}  // namespace rill::backend
