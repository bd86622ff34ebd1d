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

Status CpuBackend::apply_penalties_impl(const PenaltyArgs& a) {
  const int64_t R = a.logits.size(0), V = a.logits.size(1);
  for (int64_t r = 0; r < R; ++r) {
    float* logits = cpu::row_f32(a.logits, r);
    const float presence = a.penalties[3 * r], frequency = a.penalties[3 * r + 1], repetition = a.penalties[3 * r + 2];
    for (int32_t i = a.row_offsets[r]; i < a.row_offsets[r + 1]; ++i) {
      const int32_t t = a.tokens[i];
      if (t < 0 || t >= V) continue;
      float& l = logits[t];
      if (repetition != 1.0f) l = l > 0 ? l / repetition : l * repetition;
      const int32_t n = a.output_counts[i];
      l -= frequency * float(n) + (n > 0 ? presence : 0.0f);
    }
  }
  return {};
}

Status CpuBackend::mask_logits_impl(const TokenMaskArgs& a) {
  const int64_t R = a.logits.size(0), V = a.logits.size(1);
  for (int64_t r = 0; r < R; ++r) {
    float* logits = cpu::row_f32(a.logits, r);
    const uint32_t* words = a.mask + r * a.words_per_row;
    for (int64_t t = 0; t < V; ++t)
      if (!((words[t / 32] >> (t % 32)) & 1u)) logits[t] = -INFINITY;
  }
  return {};
}

Status CpuBackend::nonfinite_rows_impl(const NonfiniteRowsArgs& a) {
  const int64_t R = a.logits.size(0), V = a.logits.size(1);
  for (int64_t r = 0; r < R; ++r) {
    const float* l = cpu::row_f32(a.logits, r);
    a.out.ptr<int32_t>()[r] = std::all_of(l, l + V, [](float x) { return std::isfinite(x); }) ? 0 : 1;
  }
  return {};
}

Status CpuBackend::logprobs_impl(const LogprobsArgs& a) {
  const int64_t R = a.logits.size(0), V = a.logits.size(1);
  for (int64_t r = 0; r < R; ++r) {
    const float* l = cpu::row_f32(a.logits, r);
    const float mx = *std::max_element(l, l + V);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(double(l[v] - mx));
    const float lse = mx + float(std::log(sum));
    const int32_t s = a.sampled.ptr<int32_t>()[r];
    a.out_logprob.ptr<float>()[r] = (s >= 0 && s < V) ? l[s] - lse : -INFINITY;
    if (a.top_n == 0) continue;
    std::vector<int32_t> idx(static_cast<size_t>(V));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + a.top_n, idx.end(),
                      [&](int32_t x, int32_t y) { return l[x] > l[y] || (l[x] == l[y] && x < y); });
    for (int k = 0; k < a.top_n; ++k) {
      a.out_top_ids.ptr<int32_t>()[r * a.out_top_ids.stride(0) + k] = idx[size_t(k)];
      a.out_top_logprobs.ptr<float>()[r * a.out_top_logprobs.stride(0) + k] = l[idx[size_t(k)]] - lse;
    }
  }
  return {};
}

}  // namespace rill::backend
