// The Kimi pre-tokenizer (spec §6.2) as a hand-written scanner. Same pieces as tiktoken running
//   [\p{Han}]+ | [^\r\n\p{L}\p{N}]?U*L+C? | [^\r\n\p{L}\p{N}]?U+L*C? | \p{N}{1,3} | '
//   '?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
// (U, L: the two case classes minus Han; C: the (?i:'s|'t|'re|'ve|'m|'ll|'d) contractions) with
// leftmost-first backtracking semantics, each alternative resolved in closed form. Why not PCRE2: its
// Unicode 14 tables disagree with tiktoken's Unicode 16 ones, and the scanner is faster (docs/PERF.md).
#pragma once

#include <cstddef>
#include <string_view>

#include "text/tokenizer/unicode_classes.h"

namespace rill::text {

class KimiPreTokenizer {
 public:
  KimiPreTokenizer() : table_(&unicode_class_table()) {}

  // End (byte offset, > pos) of the piece that starts at `pos` < text.size(). The pattern matches every
  // character, so consecutive pieces tile the text. Ill-formed UTF-8 bytes count as one punctuation
  // character each (tiktoken itself only accepts valid strings).
  size_t piece_end(std::string_view text, size_t pos) const;

  // Calls emit(piece) for every piece of `text`, in order.
  template <typename Emit>
  void split(std::string_view text, Emit&& emit) const {
    for (size_t pos = 0; pos < text.size();) {
      const size_t end = piece_end(text, pos);
      emit(text.substr(pos, end - pos));
      pos = end;
    }
  }

 private:
  const UnicodeClassTable* table_;
};

}  // namespace rill::text
