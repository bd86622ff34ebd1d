#include "text/constraint/grammar_constraint.h"

#include <algorithm>

#include "core/log.h"

namespace rill::text::constraint {
namespace {
constexpr size_t kMaxCachedMasks = 64;  // 20 KiB each for the Kimi vocabulary
constexpr size_t kMaxCountedMasks = 8;  // 160 KiB each for the Kimi vocabulary
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                                     std::shared_ptr<const TokenMasker> masker, std::vector<int32_t> end_tokens)
    : masker_(std::move(masker)), end_tokens_(std::move(end_tokens)), matcher_(std::move(grammar)) {}

void GrammarConstraint::allowed_tokens(std::span<uint32_t> mask) {
  if (broken_ || ended_) {
    std::fill(mask.begin(), mask.end(), ~0u);
    return;
  }
  // The caller's rows may be wider than this vocabulary (padded model vocabularies): those ids stay off.
  if (!counted_mask(mask)) {
    auto it = cache_.find(matcher_.state());
    if (it == cache_.end()) {
      if (cache_.size() >= kMaxCachedMasks) cache_.clear();
      std::vector<uint32_t> m(masker_->mask_words());
      masker_->allowed(matcher_, m);
      it = cache_.emplace(matcher_.state(), std::move(m)).first;
    }
    std::fill(mask.begin(), mask.end(), 0u);
    std::copy_n(it->second.begin(), std::min(it->second.size(), mask.size()), mask.begin());
  }
  const bool any = std::any_of(mask.begin(), mask.end(), [](uint32_t w) { return w != 0; });
  if (matcher_.is_complete() || !any) {
    // Complete: it may end here. Stuck (no token of this vocabulary spells what the grammar needs next): end
    // rather than sample from nothing.
    if (!any && !matcher_.is_complete()) RILL_LOG_WARN("constrained decoding: no token continues the grammar; ending");
    for (int32_t t : end_tokens_)
      if (t >= 0 && t < masker_->vocab_size()) set_bit(mask, t);
  }
  if (std::all_of(mask.begin(), mask.end(), [](uint32_t w) { return w == 0; }))
    std::fill(mask.begin(), mask.end(), ~0u);  // nothing to end with either: unconstrained
}

bool GrammarConstraint::counted_mask(std::span<uint32_t> mask) {
  // A state seen before needs no view; an unbounded string's state is one of those after its first token.
  if (cache_.contains(matcher_.state())) return false;
  std::optional<CountedView> view = counted_view(matcher_);
  if (!view) return false;
  auto it = counted_.find(view->relaxed.state());
  if (it == counted_.end()) {
    if (counted_.size() >= kMaxCountedMasks) counted_.clear();
    std::optional<CountedMask> walked = CountedMask::walk(*masker_, view->relaxed);
    it = counted_.emplace(view->relaxed.state(),
                          walked ? std::make_shared<const CountedMask>(std::move(*walked)) : nullptr).first;
  }
  if (!it->second) return false;
  it->second->fill(view->budget, mask);
  return true;
}

void GrammarConstraint::accept(int32_t token) {
  if (broken_ || ended_) return;
  if (matcher_.is_complete() && std::find(end_tokens_.begin(), end_tokens_.end(), token) != end_tokens_.end()) {
    ended_ = true;
    return;
  }
  if (!masker_->advance(matcher_, token)) {
    if (std::find(end_tokens_.begin(), end_tokens_.end(), token) != end_tokens_.end()) {
      ended_ = true;  // the stuck case above
      return;
    }
    RILL_LOG_WARN("constrained decoding: token {} is outside the grammar; constraints are off for this request", token);
    broken_ = true;
  }
}

std::unique_ptr<TokenConstraint> GrammarConstraint::fork() const {
  return std::make_unique<GrammarConstraint>(*this);
}

}  // namespace rill::text::constraint
