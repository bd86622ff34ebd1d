// The obvious reference for a vocabulary mask: copy the matcher and feed each token alone.
#pragma once

#include <cstdint>
#include <vector>

#include "text/constraint/token_mask.h"

namespace rill::text::constraint {

inline std::vector<uint32_t> mask_by_feeding_each_token(const TokenMasker& tm, const Matcher& m) {
  std::vector<uint32_t> mask(tm.mask_words(), 0);
  for (int32_t id = 0; id < tm.vocab_size(); ++id) {
    Matcher c = m;
    if (tm.advance(c, id)) set_bit(mask, id);
  }
  return mask;
}

}  // namespace rill::text::constraint
