// The reference tokenizer's chunking guard (tokenization_kimi.py `encode`): the text is cut into pieces of
// at most 400,000 code points, and each of those wherever a run of code points that agree on Python's
// str.isspace() grows past 25,000. Every piece is encoded on its own (the pattern's look-ahead and the
// special-token search stop at a cut), so ids only differ from an uncut encode for pathological inputs, but
// they must match the reference there too.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace rill::text {

inline constexpr size_t kMaxEncodeChars = 400'000;
inline constexpr size_t kMaxRunChars = 25'000;

// The pieces, in order; empty pieces are dropped (they encode to nothing).
std::vector<std::string_view> split_reference_chunks(std::string_view text);

template <typename Emit>
void for_each_reference_chunk(std::string_view text, Emit&& emit) {
  // A text of at most 25,000 bytes holds at most 25,000 code points: nothing to cut (the common case).
  if (text.size() <= kMaxRunChars) {
    if (!text.empty()) emit(text);
    return;
  }
  for (std::string_view piece : split_reference_chunks(text)) emit(piece);
}

}  // namespace rill::text
