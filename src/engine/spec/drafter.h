// Drafter: proposes draft tokens for one sequence from what it has seen (prompt and output so far), for the
// speculative decoding the engine verifies in one step (../shared/spec/speculative.md; issue #21). Drafters
// are host-side, called on the engine thread only; they never see logits. A proposal may be shorter than
// asked, or empty.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace rill::engine::spec {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to `max_tokens` tokens expected to follow `context` (the prompt, then every accepted output token).
  virtual std::vector<int32_t> propose(std::span<const int32_t> context, int max_tokens) const = 0;
  // A request ended (finished, stopped, cancelled) with this prompt and output: drafters that learn from
  // recent requests (SuffixDrafter) keep what they need.
  virtual void observe_finished(std::span<const int32_t> /*prompt*/, std::span<const int32_t> /*output*/) {}
};

}  // namespace rill::engine::spec
