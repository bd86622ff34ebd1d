// Grammars for constrained decoding: a small set of node kinds (bytes, special tokens, sequence, choice,
// repetition, named rules for recursion) built once per request shape and shared read-only, and a Matcher
// that tracks every way the input so far can continue (a set of parse stacks, so choices need no lookahead).
//
// Input is a string of symbols: the bytes of ordinary tokens (0..255) and whole special tokens
// (kSpecialBase + token id), so a grammar can say "<|open|>" as one symbol and `call tool="` as bytes that
// any tokenization of that text spells.
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace rill::text::constraint {

using Symbol = int32_t;
inline constexpr Symbol kSpecialBase = 256;
inline constexpr Symbol special_symbol(int32_t token_id) { return kSpecialBase + token_id; }

using NodeId = int32_t;

// What a node matches. Built only through GrammarBuilder.
struct Node {
  enum class Kind : uint8_t { Bytes, Special, ByteClass, Utf8Char, Seq, Alt, Repeat, Rule };
  Kind kind = Kind::Seq;
  std::string bytes;             // Bytes: these bytes in order (non-empty)
  int32_t token = -1;            // Special: this token id
  std::bitset<256> byte_class;   // ByteClass: one byte of this set; Utf8Char: the ASCII characters allowed
  std::vector<NodeId> children;  // Seq (in order), Alt (any one), Repeat (children[0]), Rule (children[0]: body)
  int32_t min = 0, max = -1;     // Repeat: between min and max times (-1: unbounded)
};

class Grammar {
 public:
  const Node& node(NodeId id) const { return nodes_[size_t(id)]; }
  NodeId root() const { return root_; }
  size_t size() const { return nodes_.size(); }
  // Whether the node can match the empty string.
  bool nullable(NodeId id) const { return nullable_[size_t(id)]; }

 private:
  friend class GrammarBuilder;
  std::vector<Node> nodes_;
  std::vector<bool> nullable_;
  NodeId root_ = -1;
};

// What one grammar may hold. Every real tool and response schema is far inside (the largest test schema
// builds a few thousand nodes); at these limits a compile takes milliseconds and a token mask over the Kimi
// vocabulary a few (tests/text/constraint/grammar_limits_test.cc prints both). A choice's width is what a
// mask pays for: each way the parse can go is a parse stack the vocabulary walk tests at every byte.
struct GrammarLimits {
  size_t max_nodes = 1 << 16;
  size_t max_literal_bytes = 1 << 20;  // the bytes of every Bytes node together (enum / const texts)
  size_t max_alternatives = 4096;      // children of one choice (enum values, anyOf branches)
};

class GrammarBuilder {
 public:
  explicit GrammarBuilder(GrammarLimits limits = {}) : limits_(limits) {}
  NodeId bytes(std::string_view text);  // empty text: empty()
  NodeId special(int32_t token_id);
  NodeId byte_class(const std::bitset<256>& set);
  NodeId byte_range(uint8_t lo, uint8_t hi);  // one byte in [lo, hi]
  NodeId seq(std::vector<NodeId> children);
  NodeId alt(std::vector<NodeId> children);
  // The child must not match the empty string when max is unbounded (the matcher would loop); checked by
  // build.
  NodeId repeat(NodeId child, int32_t min, int32_t max);
  NodeId optional(NodeId child) { return repeat(child, 0, 1); }
  NodeId empty() { return seq({}); }
  // One well-formed UTF-8 character (1-4 bytes; overlong forms and surrogates excluded) whose code point is
  // >= 0x20 and not one of `excluded_ascii` (e.g. "\"\\" inside a JSON string).
  NodeId utf8_char(std::string_view excluded_ascii = "");
  // Any bytes at all, as ordinary tokens carry them (no special tokens): e.g. a thinking channel.
  NodeId any_bytes();

  // Named rules make recursion possible: declare, use in other nodes, then define once.
  NodeId declare_rule();
  void define_rule(NodeId rule, NodeId body);

  // Fails when a rule is undefined, a node id is out of range, an unbounded repeat's child can match
  // nothing (named in the message), or a limit was passed.
  Result<std::shared_ptr<const Grammar>> build(NodeId root);

  // Ok until a limit is passed; from then on the error naming it. Past a limit nothing more is stored (every
  // new node is node 0, definitions are dropped), so a compiler that checks only now and then still holds
  // the memory and time of the limits, and build() fails.
  const Status& limit_status() const { return over_limit_; }
  const GrammarLimits& limits() const { return limits_; }

 private:
  NodeId add(Node n);
  GrammarLimits limits_;
  std::vector<Node> nodes_;
  size_t literal_bytes_ = 0;
  Status over_limit_;
};

// Parse frames one matcher step may push while expanding choices. Choices that share choices (anyOf [a, a]
// with a = anyOf [b, b], ... through $refs) would otherwise enumerate exponentially many equal stacks
// before merging them; with this budget a step (and so one vocabulary walk per trie node) is bounded.
inline constexpr size_t kMaxExpandWork = 1 << 16;

// The set of ways the symbols fed so far continue in the grammar. A value type (copy it to try a symbol
// without committing, as the token mask does for every vocabulary entry).
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  // Feeds one symbol; false (and the state unchanged) when no parse accepts it.
  bool advance(Symbol s);
  bool advance_bytes(std::string_view text);  // all or nothing
  bool can_advance(Symbol s) const;
  // The input so far is a whole sentence of the grammar (it may still continue).
  bool is_complete() const;
  // No symbol can follow (complete and nothing continues it).
  bool is_finished() const;

  // A frame of a parse stack: a node and how far into it the parse is (Bytes: offset; Seq: next child;
  // Repeat: repetitions done, capped at min once unbounded; Utf8Char: 0, or the continuation bytes still
  // due and the range of the next one).
  struct Frame {
    NodeId node;
    int32_t pos;
    auto operator<=>(const Frame&) const = default;
  };
  using Stack = std::vector<Frame>;
  // Sorted, without duplicates: equal states give equal vectors (a mask cache's key).
  const std::vector<Stack>& state() const { return stacks_; }

  const Grammar& grammar() const { return *g_; }

  // Counting matchers (counted_mask.h): a copy in which every frame of the bounded repeat `repeat` at count
  // `count` (>= the repeat's min) may repeat without bound, each stack counting the repetitions it starts
  // there. Its state is the same for every such count, so it serves as a cache key; a stack is valid for the
  // original matcher iff its count is at most max - count. Fails (nullopt) when one stack holds two such
  // frames: one count per stack could not tell which of them a repetition belongs to.
  std::optional<Matcher> counting(NodeId repeat, int32_t count) const;
  bool is_counting() const { return base_ != 0; }
  // Counting: the fewest repetitions any stack has started (INT32_MAX when no stack is left).
  int32_t min_started() const;
  // A step refused its symbol because it passed kMaxExpandWork (kept after that failed advance).
  bool over_work() const { return over_work_; }

  // A copy that does not share ownership of the grammar: valid while this matcher (or another owner) lives.
  // Copying the owning pointer is an atomic count on one shared cache line, which threads walking the
  // vocabulary together would fight over (TokenMasker's walk copies a matcher per byte).
  Matcher borrow() const;
  // The start state passed kMaxExpandWork and misses parses (build() refuses such grammars).
  bool truncated() const { return truncated_; }

 private:
  Matcher() = default;
  static constexpr NodeId kCounterNode = -1;
  static constexpr int32_t kCountedPos = -1;  // a Repeat frame's pos is otherwise a count >= 0
  void expand(Stack s, std::vector<Stack>& out, int depth, size_t& work) const;
  bool step(Symbol s, std::vector<Stack>& out, bool& over_work) const;
  // No frame of the grammar left above the stack's base (the counter of a counting matcher).
  bool done(const Stack& s) const { return s.size() == base_; }

  std::shared_ptr<const Grammar> owner_;  // empty in a borrowed copy
  const Grammar* g_ = nullptr;
  // Each top is a terminal (Bytes / Special / ByteClass / Utf8Char), or the stack is done. A counting
  // matcher's stacks start with {kCounterNode, repetitions started}; its counted frames have pos kCountedPos.
  std::vector<Stack> stacks_;
  size_t base_ = 0;
  bool truncated_ = false, over_work_ = false;
};

}  // namespace rill::text::constraint
