// Drafter: proposes draft tokens for one sequence from what it has seen (prompt and output so far), for the
// speculative decoding the engine verifies in one step (../shared/spec/speculative.md; issue #21). Drafters
// are host-side, called on the engine thread only; they never see logits. A proposal may be shorter than
// asked, or empty.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace rill::engine::spec {

// One sequence's question to a drafter: up to `max_tokens` drafts to follow `context`.
struct DraftQuery {
  std::span<const int32_t> context;
  int max_tokens = 0;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to `max_tokens` tokens expected to follow `context` (the prompt, then every accepted output token).
  // Asked for fewer, a drafter proposes a prefix of what it would propose for more (the scheduler trims a
  // proposal to the blocks it can get).
  virtual std::vector<int32_t> propose(std::span<const int32_t> context, int max_tokens) const = 0;
  // The proposals of a step's sequences, in order. Drafters that run a model override it to answer them
  // together (DraftModelDrafter: one batched draft step per token instead of one request after another).
  virtual std::vector<std::vector<int32_t>> propose_batch(std::span<const DraftQuery> queries) const {
    std::vector<std::vector<int32_t>> out;
    out.reserve(queries.size());
    for (const DraftQuery& q : queries) out.push_back(propose(q.context, q.max_tokens));
    return out;
  }
  // A request ended (finished, stopped, cancelled) with this prompt and output: drafters that learn from
  // recent requests (SuffixDrafter) keep what they need.
  virtual void observe_finished(std::span<const int32_t> /*prompt*/, std::span<const int32_t> /*output*/) {}
};

}  // namespace rill::engine::spec
