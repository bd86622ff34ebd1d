// Masks for counted states: a bounded repeat's count (a string's maxLength, a pattern's {m,n}) is part of the
// matcher state, so the mask cache keyed by state missed on every token and each paid a vocabulary walk.
// Here the count is split off: a state whose repeat has reached its min is walked once with that repeat
// unbounded (Matcher::counting), recording per token the fewest repetitions it starts; the state at any
// later count of the same shape is then a filter of that walk by the repetitions still allowed (max − count),
// with no walk. The masks are exactly those of a full walk (counted_mask_test checks it).
//
// Exact because nothing else depends on the count: from count c >= min every step is allowed at c + j iff
// it is at c + j' for the same parse, except starting a repetition, which needs c + started < max. So a parse
// of the token survives iff it started at most max − c repetitions, and the token is allowed iff its
// cheapest parse did. Repetitions are counted where they start (a repetition begun at the token's end
// counts: the real matcher begins it only with room left). Not applied below min (stopping is not yet
// allowed there), to a repeat whose child can match nothing (a repetition would cost no input), or where
// one parse stack holds the repeat twice at the count.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "text/constraint/grammar.h"
#include "text/constraint/token_mask.h"

namespace rill::text::constraint {

// A state seen as shape + budget: `relaxed` is the counting matcher (its state() is the same for every count
// of this shape: the cache key), `budget` the repetitions the counted repeat may still start.
struct CountedView {
  Matcher relaxed;
  int32_t budget;
};

// The view of `m` when its state holds a bounded repeat that can be counted (the innermost such repeat
// frame: the count that changes with each token); nullopt otherwise.
std::optional<CountedView> counted_view(const Matcher& m);

// One counting walk's result: per token the fewest repetitions it starts.
class CountedMask {
 public:
  // The walk from a counting matcher; nullopt when its counts are not exact (TokenMasker::allowed_counted),
  // and the caller walks the state itself.
  static std::optional<CountedMask> walk(const TokenMasker& masker, const Matcher& relaxed);
  // Sets the bits of the tokens that start at most `budget` repetitions, clears the rest (mask may be wider
  // than the vocabulary: the extra words are cleared).
  void fill(int32_t budget, std::span<uint32_t> mask) const;

 private:
  // Most of a long string's tokens are filled with the budget at kFew or more: a copy of few_ and the rare
  // tokens of more repetitions from `more_`, about what the cached mask of an unbounded string costs. Below,
  // one pass over `started_`.
  static constexpr uint8_t kFew = 15, kMore = kFew + 1, kNotAllowed = 255;
  std::vector<uint32_t> few_;  // the tokens of at most kFew repetitions
  std::vector<std::pair<uint16_t, int32_t>> more_;  // (repetitions, token) of the others, in order
  // Per token, rounded up to a multiple of 32: the repetitions, kMore for more than kFew, kNotAllowed where
  // no parse takes the token.
  std::vector<uint8_t> started_;
};

}  // namespace rill::text::constraint
