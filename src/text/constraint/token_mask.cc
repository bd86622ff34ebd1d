#include "text/constraint/token_mask.h"

#include <algorithm>

namespace rill::text::constraint {

TokenMasker::TokenMasker(const Tokenizer& tokenizer) : vocab_size_(tokenizer.vocab_size()) {
  bytes_.resize(size_t(vocab_size_));
  special_.resize(size_t(vocab_size_));
  for (int32_t id = 0; id < vocab_size_; ++id) {
    special_[size_t(id)] = tokenizer.is_special(id);
    if (special_[size_t(id)]) {
      specials_.push_back(id);
    } else {
      bytes_[size_t(id)] = tokenizer.token_bytes(id);
      if (!bytes_[size_t(id)].empty()) sorted_.push_back(id);
    }
  }
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) { return bytes_[size_t(a)] < bytes_[size_t(b)]; });
}

bool TokenMasker::advance(Matcher& m, int32_t token) const {
  if (token < 0 || token >= vocab_size_) return false;
  if (special_[size_t(token)]) return m.advance(special_symbol(token));
  return m.advance_bytes(bytes_[size_t(token)]);
}

// Tokens sorted_[lo, hi) all start with the `depth` bytes that `m` has just consumed.
void TokenMasker::walk(const Matcher& m, size_t lo, size_t hi, size_t depth, std::span<uint32_t> mask) const {
  // A token that ends here sorts first (a prefix sorts before its extensions).
  while (lo < hi && bytes_[size_t(sorted_[lo])].size() == depth) set_bit(mask, sorted_[lo++]);
  while (lo < hi) {
    const uint8_t c = uint8_t(bytes_[size_t(sorted_[lo])][depth]);
    // The group of tokens whose next byte is c.
    const size_t end = size_t(std::partition_point(sorted_.begin() + long(lo), sorted_.begin() + long(hi),
                                                   [&](int32_t id) { return uint8_t(bytes_[size_t(id)][depth]) <= c; }) -
                              sorted_.begin());
    if (m.can_advance(c)) {
      Matcher next = m;
      next.advance(c);
      walk(next, lo, end, depth + 1, mask);
    }
    lo = end;
  }
}

void TokenMasker::allowed(const Matcher& m, std::span<uint32_t> mask) const {
  std::fill(mask.begin(), mask.end(), 0u);
  walk(m, 0, sorted_.size(), 0, mask);
  for (int32_t id : specials_)
    if (m.can_advance(special_symbol(id))) set_bit(mask, id);
}

}  // namespace rill::text::constraint
