// GrammarConstraint: a TokenConstraint that keeps a request's output inside a grammar. Once the grammar is
// complete the end tokens (the request's stop ids) are allowed too; once it is finished only they are.
// Masks are cached by matcher state: inside a JSON string or a thinking channel every step has the same
// state, so the vocabulary walk runs once for it. A state with a bounded repeat's count in it (maxLength,
// {m,n}) changes every token; its count is split off (counted_mask.h) and the walk cached per shape.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "text/constraint/counted_mask.h"
#include "text/constraint/grammar.h"
#include "text/constraint/token_constraint.h"
#include "text/constraint/token_mask.h"

namespace rill::text::constraint {

class GrammarConstraint : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenMasker> masker,
                    std::vector<int32_t> end_tokens);

  void allowed_tokens(std::span<uint32_t> mask) override;
  void accept(int32_t token) override;
  // A copy with the matcher's state and the masks cached so far (up to 64 of ceil(vocab / 32) words, and up
  // to 8 counted walks of a byte per token, shared with the copy).
  std::unique_ptr<TokenConstraint> fork() const override;

  const Matcher& matcher() const { return matcher_; }
  // A token was accepted that the grammar did not allow (a bug or a hand-fed token): constraints are off.
  bool broken() const { return broken_; }

 private:
  // Fills `mask` from the counted walk of this state's shape when it has one (false: walk it as a state).
  bool counted_mask(std::span<uint32_t> mask);

  std::shared_ptr<const TokenMasker> masker_;
  std::vector<int32_t> end_tokens_;
  Matcher matcher_;
  bool broken_ = false, ended_ = false;
  std::map<std::vector<Matcher::Stack>, std::vector<uint32_t>> cache_;
  // By the counting matcher's state; null where the counting walk was not exact (those states walk each time).
  std::map<std::vector<Matcher::Stack>, std::shared_ptr<const CountedMask>> counted_;
};

}  // namespace rill::text::constraint
