// TokenMasker: which vocabulary entries a Matcher accepts whole, found in one walk over the vocabulary's
// token bytes sorted (a trie without the pointers): tokens that share a prefix share the matcher steps for
// it, and a byte the grammar rejects skips every token under it. Built once per tokenizer, shared by requests.
// A large walk (inside a string nearly every token is allowed) is split into subtrees by their first bytes and
// spread over the process's thread pool (core/thread_pool.h); the result does not depend on the split.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "text/constraint/grammar.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::text::constraint {

class TokenMasker {
 public:
  explicit TokenMasker(const Tokenizer& tokenizer);

  int32_t vocab_size() const { return vocab_size_; }
  size_t mask_words() const { return size_t(vocab_size_ + 31) / 32; }
  // Sets the bit of every token whose bytes (rank tokens) or whose special symbol (special tokens) the
  // matcher accepts from its state; clears all others. `parallel`: may use the thread pool.
  void allowed(const Matcher& m, std::span<uint32_t> mask, bool parallel = true) const;
  // For a counting matcher (Matcher::counting, counted_mask.h): as allowed(), and per allowed token the
  // fewest repetitions of the counted frame any of its parses starts, in started[token] (others untouched).
  // False when the counts are not exact: a step passed kMaxExpandWork (the counting matcher has more stacks
  // than the one it stands for, so it can refuse a symbol that one accepts) or a count passed 65534.
  bool allowed_counted(const Matcher& m, std::span<uint32_t> mask, std::span<uint16_t> started,
                       bool parallel = true) const;
  // The symbols of one token, fed to a Matcher in order.
  bool advance(Matcher& m, int32_t token) const;

 private:
  // Where a walk writes: the mask, and for a counting walk the counts and whether they are exact.
  struct Out {
    std::span<uint32_t> mask;
    std::span<uint16_t> started;  // empty unless counting
    std::atomic<bool>* inexact = nullptr;
  };
  void mark(const Matcher& m, int32_t token, const Out& out) const;
  void walk_all(const Matcher& m, const Out& out, bool parallel) const;
  // The tokens sorted_[lo, hi), which all start with `depth` bytes that `m` has just consumed.
  struct Subtree {
    Matcher m;
    size_t lo, hi, depth;
  };
  // Sets the bits of the subtree's tokens that end at its depth, then calls visit(child) for each next byte
  // the matcher accepts, with the child's matcher advanced by it (borrowed: valid while s.m lives).
  template <typename Visit>
  void for_each_child(const Subtree& s, const Out& out, Visit&& visit) const;
  void walk(const Subtree& s, const Out& out) const;
  // Cuts the walk from `root` into subtrees of at most `limit` tokens (or at kMaxSplitDepth), in `parts`;
  // tokens that end above a cut are marked in `out` here.
  void split(const Subtree& root, size_t limit, std::vector<Subtree>& parts, const Out& out) const;

  int32_t vocab_size_ = 0;
  std::vector<std::string_view> bytes_;  // per id: a rank token's bytes (the tokenizer owns them)
  std::vector<bool> special_;
  std::vector<int32_t> sorted_;          // rank token ids by their bytes
  std::vector<int32_t> specials_;        // special token ids
};

inline void set_bit(std::span<uint32_t> mask, int32_t t) { mask[size_t(t) / 32] |= 1u << (uint32_t(t) % 32); }
inline bool test_bit(std::span<const uint32_t> mask, int32_t t) { return (mask[size_t(t) / 32] >> (uint32_t(t) % 32)) & 1u; }

}  // namespace rill::text::constraint
