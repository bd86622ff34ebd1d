// TokenConstraint: what the engine sees of constrained decoding. Before each sampled token of a request it
// asks which tokens may come next; after sampling it reports the token taken. Stateful, one per sequence.
#pragma once

#include <cstdint>
#include <span>

namespace rill::text::constraint {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets bit (t % 32) of mask[t / 32] for every token t that may be sampled next and clears the rest
  // (mask has ceil(vocab / 32) words). Never leaves the set empty.
  virtual void allowed_tokens(std::span<uint32_t> mask) = 0;
  // The token sampled (one allowed_tokens allowed).
  virtual void accept(int32_t token) = 0;
};

}  // namespace rill::text::constraint
