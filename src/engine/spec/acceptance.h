// Greedy acceptance of a verify step (../shared/spec/speculative.md §4): the step fed the sequence's last
// token and k drafts, and sampled (greedily) one token at each of those k + 1 positions. Draft i is accepted
// while it equals the token sampled at the position before it; the emitted tokens are the accepted drafts and
// then the sampled token at the first mismatch, or after all k the bonus token — so a step emits 1 to k + 1
// tokens, exactly those the model would have produced one step at a time. (vLLM's rejection_sampler.py is
// the same rule for greedy requests; sampled requests need the probabilistic rule, not built yet.)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace rill::engine::spec {

struct Acceptance {
  int n_accepted = 0;            // drafts accepted, 0..k
  std::vector<int32_t> emitted;  // n_accepted drafts + 1 token
};

// `sampled`: the k + 1 greedy tokens of the verify positions, `drafts`: the k drafts fed after the last
// token.
Acceptance accept_greedy(std::span<const int32_t> drafts, std::span<const int32_t> sampled);

}  // namespace rill::engine::spec
