// Token sampling on the CPU: greedy, or temperature -> top-k -> top-p -> min-p, drawn with the counter-based
// RNG so (seed, counter) picks the same token on every backend.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"
#include "backend/sampling.h"

namespace rill::backend {

Status CpuBackend::sample_impl(const SampleArgs& a) {
  const int64_t R = a.logits.size(0), V = a.logits.size(1);
  for (int64_t r = 0; r < R; ++r) {
    const float* logits = cpu::row_f32(a.logits, r);
    a.out_ids.ptr<int32_t>()[r] = sample_row(logits, int32_t(V), a.rows[r]);
  }
  return {};
}

}  // namespace rill::backend
