// MarkerScanner: cuts incrementally fed text into plain-text runs and markers from a fixed set.
//
// It decides only when the text seen so far is enough: a position whose rest is a proper prefix of
// some marker is held back until more text (or the end) arrives, and when markers overlap ("<|close|>"
// and "<|close|>think<|sep|>") the longest one wins. A trailing incomplete UTF-8 sequence is also held
// back. So the tokens it produces do not depend on how the text was split into feed() calls, except
// that one text run may come out as several shorter runs.
// Also home to the few text helpers every family's state machine shares.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer/utf8.h"  // utf8_incomplete_tail: shared with the streaming detokenizer

namespace rill::text {

class MarkerScanner {
 public:
  // `markers` must outlive the scanner (string literals); none may be empty.
  explicit MarkerScanner(std::vector<std::string_view> markers);

  struct Token {
    bool is_marker = false;
    int marker = -1;        // index into the marker list when is_marker
    std::string_view text;  // the plain text, or the marker's own spelling; valid until the next feed()
  };

  void feed(std::string_view text);
  // Produces the next token into `out`; false when more input is needed to decide (or, with
  // at_end, when everything has been consumed). With at_end, held-back text is released as is.
  bool next(Token& out, bool at_end);

  size_t max_marker_size() const { return max_size_; }

  // At the end of the text: drops held-back text that is a proper prefix of a marker (a marker cut off by
  // max_tokens), so no protocol markup is released as text. Returns how many bytes were dropped.
  size_t drop_cut_marker();

 private:
  enum class Match { None, Partial, Full };
  Match match_at(size_t pos, bool at_end, int& marker) const;
  size_t utf8_safe_end(size_t end) const;

  std::vector<std::string_view> markers_;
  std::string first_bytes_;  // the bytes a marker can start with, for find_first_of
  size_t max_size_ = 0;
  std::string buf_;
  size_t pos_ = 0;  // consumed prefix of buf_
};

// JSON whitespace, the only text the K2 and K3 formats tolerate between markers.
inline bool is_json_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
bool is_blank(std::string_view text);
std::string_view trim_json_space(std::string_view text);

// Quotes at most `max_bytes` of `text` for an error message, never cutting a UTF-8 sequence.
std::string quote_excerpt(std::string_view text, size_t max_bytes = 40);

// Length of the incomplete UTF-8 sequence that ends `text` (0 when the last sequence is complete
// or the bytes are not a valid sequence start), so a caller can hold it back.

}  // namespace rill::text
