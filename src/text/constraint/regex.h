// A subset of ECMAScript regular expressions (what JSON Schema's `pattern` and the `format` patterns need)
// compiled into grammar nodes for a JSON string whose decoded text the expression matches.
//
// Supported: literals, `.`, classes `[a-z]` / `[^...]` (with the escapes below inside), \d \D \w \W \s \S,
// \t \n \r \f \v \0 \xHH \uHHHH (surrogate pairs joined) \u{H...}, escaped syntax characters, groups
// `(...)`, `(?:...)`, `(?<name>...)`, alternation, `?` `*` `+` `{n}` `{n,}` `{n,m}` (lazy forms too: the
// language is the same), and `^` / `$` at the start / end of the whole pattern or of a top-level
// alternative. Rejected with an error naming the construct: lookahead / lookbehind, backreferences (\1, \k),
// word boundaries (\b, \B), \p{...} properties, \cX, anchors anywhere else, and a repeat without bound of
// something that can match the empty string.
//
// Matching is whole-string: the grammar's strings match the expression from start to end. JSON Schema
// patterns are unanchored ("contains a match"), so every such string is valid; the grammar simply does not
// offer padding around the match.
//
// Spelling: each character has one JSON spelling, that of nlohmann's dump: '"' and '\' escaped, \b \f \n
// \r \t for those controls, \u00XX for the other ones below U+0020, everything else as UTF-8.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "text/constraint/grammar.h"

namespace rill::text::constraint {

// A set of code points (surrogates D800-DFFF never included): sorted, disjoint, non-adjacent ranges.
class CodePointSet {
 public:
  static CodePointSet range(uint32_t lo, uint32_t hi);
  static CodePointSet of(uint32_t c) { return range(c, c); }
  void add(const CodePointSet& other);
  CodePointSet complement() const;
  bool empty() const { return ranges_.empty(); }
  bool contains(uint32_t c) const;
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

 private:
  void add_range(uint32_t lo, uint32_t hi);
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

struct Regex {
  enum class Kind { Chars, Seq, Alt, Repeat };
  Kind kind = Kind::Seq;
  CodePointSet chars;           // Chars: one character of this set
  std::vector<Regex> children;  // Seq, Alt, Repeat (children[0])
  int32_t min = 0, max = -1;    // Repeat: between min and max times (-1: unbounded)

  // The number of characters of a match: [min_length, max_length] (-1: unbounded).
  int32_t min_length() const;
  int32_t max_length() const;
};

// Errors name the construct and its offset in the pattern ("lookahead (?= at 3 is not supported").
Result<Regex> parse_regex(std::string_view pattern);

// The same language cut to strings of [min_chars, max_chars] characters (max -1: unbounded), when that can
// be said by narrowing repeat counts: each top-level alternative whose length range is not already inside
// the bounds must be a sequence of fixed-length parts and one repeat of a fixed-length part. Fails
// otherwise, or when no string of the pattern has a length in bounds.
Result<Regex> fit_length(const Regex& regex, int32_t min_chars, int32_t max_chars);

// The JSON string (quotes included) of the strings `regex` matches.
NodeId json_string_node(GrammarBuilder& b, const Regex& regex);
// The strings `regex` matches as plain UTF-8 text (vLLM's guided_regex / structured_outputs.regex: the whole
// output).
NodeId text_node(GrammarBuilder& b, const Regex& regex);

}  // namespace rill::text::constraint
