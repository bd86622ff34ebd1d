// TokenConstraint: what the engine sees of constrained decoding. Before each sampled token of a request it
// asks which tokens may come next; after sampling it reports the token taken. Stateful, one per sequence.
#pragma once

#include <cstdint>
#include <memory>
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
  // An independent copy in the current state (speculative decoding walks it along draft tokens to compute
  // the masks of a verify step's later positions); null when this constraint cannot be copied (its requests
  // then get no drafts). Called on one thread while no other uses this constraint.
  virtual std::unique_ptr<TokenConstraint> fork() const { return nullptr; }
};

}  // namespace rill::text::constraint
