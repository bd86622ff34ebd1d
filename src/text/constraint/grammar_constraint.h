// GrammarConstraint: a TokenConstraint that keeps a request's output inside a grammar. Once the grammar is
// complete the end tokens (the request's stop ids) are allowed too; once it is finished only they are.
// Masks are cached by matcher state: inside a JSON string or a thinking channel every step has the same
// state, so the vocabulary walk runs once for it.
#pragma once

#include <map>
#include <memory>
#include <vector>

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
  // A copy with the matcher's state and the masks cached so far (up to 64 of ceil(vocab / 32) words).
  std::unique_ptr<TokenConstraint> fork() const override;

  const Matcher& matcher() const { return matcher_; }
  // A token was accepted that the grammar did not allow (a bug or a hand-fed token): constraints are off.
  bool broken() const { return broken_; }

 private:
  std::shared_ptr<const TokenMasker> masker_;
  std::vector<int32_t> end_tokens_;
  Matcher matcher_;
  bool broken_ = false, ended_ = false;
  std::map<std::vector<Matcher::Stack>, std::vector<uint32_t>> cache_;
};

}  // namespace rill::text::constraint
