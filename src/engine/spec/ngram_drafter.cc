#include "engine/spec/ngram_drafter.h"

#include <algorithm>

namespace rill::engine::spec {

Result<NgramDrafter> NgramDrafter::create(int min_n, int max_n) {
  if (min_n < 1)
    return invalid_argument("speculative config: prompt_lookup_min {} must be at least 1", min_n);
  if (max_n < min_n)
    return invalid_argument("speculative config: prompt_lookup_max {} must be at least prompt_lookup_min {}",
                            max_n, min_n);
  return NgramDrafter(min_n, max_n);
}

std::vector<int32_t> NgramDrafter::propose(std::span<const int32_t> context, int max_tokens) const {
  const int64_t L = int64_t(context.size());
  if (max_tokens <= 0) return {};
  // Longest suffix first; for each n, scan earlier start positions from the most recent back. O(L * max_n)
  // per call: the contexts of a decode step are short next to a step's cost (vLLM uses KMP for O(L)).
  for (int64_t n = std::min<int64_t>(max_n_, L - 1); n >= min_n_; --n) {
    const int32_t* suffix = context.data() + (L - n);
    for (int64_t start = L - n - 1; start >= 0; --start) {
      if (!std::equal(suffix, suffix + n, context.data() + start)) continue;
      const int64_t from = start + n, to = std::min<int64_t>(L, from + max_tokens);
      return std::vector<int32_t>(context.begin() + from, context.begin() + to);
    }
  }
  return {};
}

}  // namespace rill::engine::spec
