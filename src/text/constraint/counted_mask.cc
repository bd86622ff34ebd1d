#include "text/constraint/counted_mask.h"

#include <algorithm>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace rill::text::constraint {

std::optional<CountedView> counted_view(const Matcher& m) {
  const Grammar& g = m.grammar();
  // The deepest countable frame (then the lowest node and count, for a choice that depends only on the state):
  // inside a bounded string under a bounded array it is the string's, whose count moves every token.
  struct Pick {
    size_t depth;
    NodeId node;
    int32_t count;
  };
  std::optional<Pick> pick;
  for (const Matcher::Stack& s : m.state()) {
    for (size_t d = 0; d < s.size(); ++d) {
      const Matcher::Frame f = s[d];
      const Node& n = g.node(f.node);
      if (n.kind != Node::Kind::Repeat || n.max < 0 || f.pos < n.min || g.nullable(n.children[0])) continue;
      const Pick p{d, f.node, f.pos};
      if (!pick || p.depth > pick->depth ||
          (p.depth == pick->depth && std::pair(p.node, p.count) < std::pair(pick->node, pick->count)))
        pick = p;
    }
  }
  if (!pick) return std::nullopt;
  std::optional<Matcher> relaxed = m.counting(pick->node, pick->count);
  if (!relaxed) return std::nullopt;
  return CountedView{std::move(*relaxed), g.node(pick->node).max - pick->count};
}

std::optional<CountedMask> CountedMask::walk(const TokenMasker& masker, const Matcher& relaxed) {
  std::vector<uint32_t> mask(masker.mask_words());
  std::vector<uint16_t> started(size_t(masker.vocab_size()));
  if (!masker.allowed_counted(relaxed, mask, started)) return std::nullopt;
  CountedMask out;
  out.few_.assign(mask.size(), 0u);
  out.started_.assign(mask.size() * 32, kNotAllowed);
  for (int32_t t = 0; t < masker.vocab_size(); ++t) {
    if (!test_bit(mask, t)) continue;
    const uint16_t n = started[size_t(t)];
    out.started_[size_t(t)] = uint8_t(std::min<uint16_t>(n, kMore));
    if (n <= kFew) set_bit(out.few_, t);
    else out.more_.emplace_back(n, t);
  }
  std::sort(out.more_.begin(), out.more_.end());
  return out;
}

void CountedMask::fill(int32_t budget, std::span<uint32_t> mask) const {
  std::fill(mask.begin(), mask.end(), 0u);
  const size_t words = std::min(mask.size(), few_.size());
  if (budget >= kFew) {
    std::copy_n(few_.begin(), words, mask.begin());
    for (const auto& [n, t] : more_) {
      if (n > budget) break;
      if (size_t(t) / 32 < words) set_bit(mask, t);
    }
    return;
  }
  const uint8_t b = uint8_t(std::max(budget, 0));
  const uint8_t* p = started_.data();
#if defined(__SSE2__)
  // 16 tokens per compare (count <= b as min(count, b) == count).
  const __m128i bv = _mm_set1_epi8(char(b));
  for (size_t w = 0; w < words; ++w, p += 32) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
    const uint32_t lo_bits = uint32_t(_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(lo, bv), lo)));
    const uint32_t hi_bits = uint32_t(_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(hi, bv), hi)));
    mask[w] = lo_bits | (hi_bits << 16);
  }
#else
  for (size_t w = 0; w < words; ++w, p += 32) {
    uint32_t bits = 0;
    for (uint32_t i = 0; i < 32; ++i) bits |= uint32_t(p[i] <= b) << i;
    mask[w] = bits;
  }
#endif
}

}  // namespace rill::text::constraint
