// SuffixDrafter: suffix decoding (vLLM's `suffix` method; Oliaro et al., "SuffixDecoding", 2024), written
// for rill. The longest suffix of the context that occurred before — in the request's own prompt and output,
// or in the outputs of recent requests — is matched, and the draft follows the most frequent continuation
// of its occurrences, one token at a time, like a walk down a suffix tree whose edges carry occurrence
// counts: at each step the next token is the one that most occurrences of (match + drafts so far) continue
// with (ties: the smallest id), and the occurrences that continued differently drop out.
//   - Occurrences are counted in the context (each earlier end position whose preceding tokens equal the
//     pattern; the continuation may run into the suffix itself) plus in the recent outputs, kept in a count
//     trie of every substring of at most max_tree_depth tokens (SuffixCountTrie), bounded to the last
//     max_cached_requests outputs (the oldest is taken out when one more comes).
//   - The match is the longest suffix, of at most max_tree_depth tokens, with at least one continuation; a
//     draft stops when a step's most frequent token has less than min_token_prob of the occurrences, when
//     match + draft reaches max_tree_depth, or at max_spec_factor x match length tokens (vLLM's keys:
//     suffix_decoding_max_tree_depth, _max_cached_requests, _min_token_prob, _max_spec_factor).
// The engine thread alone calls it (propose, and observe_finished for every request that ends).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "core/status.h"
#include "engine/spec/drafter.h"

namespace rill::engine::spec {

// Counts of every substring of at most `depth` tokens of the streams added (a trie whose node for a string
// s holds how many times s occurs); remove() takes a stream added before out again.
class SuffixCountTrie {
 public:
  explicit SuffixCountTrie(int depth) : depth_(depth) {}
  void add(std::span<const int32_t> stream) { update(stream, +1); }
  void remove(std::span<const int32_t> stream) { update(stream, -1); }
  struct Node {
    int64_t count = 0;
    std::map<int32_t, std::unique_ptr<Node>> children;
  };
  // The node of `s` (nullptr when it does not occur or is longer than the depth).
  const Node* find(std::span<const int32_t> s) const;
  const Node* root() const { return &root_; }
  size_t n_nodes() const { return n_nodes_; }

 private:
  void update(std::span<const int32_t> stream, int delta);
  int depth_;
  Node root_;
  size_t n_nodes_ = 0;
};

struct SuffixDrafterOptions {
  int max_tree_depth = 24;        // vLLM's suffix_decoding_max_tree_depth
  int max_cached_requests = 1000;  // vLLM's suffix_decoding_max_cached_requests (vLLM: 10000); 0: none
  double min_token_prob = 0.1;    // vLLM's suffix_decoding_min_token_prob
  double max_spec_factor = 1.0;   // vLLM's suffix_decoding_max_spec_factor
};

class SuffixDrafter final : public Drafter {
 public:
  // Errors name vLLM's keys.
  static Result<std::unique_ptr<SuffixDrafter>> create(const SuffixDrafterOptions& options);
  std::vector<int32_t> propose(std::span<const int32_t> context, int max_tokens) const override;
  void observe_finished(std::span<const int32_t> prompt, std::span<const int32_t> output) override;
  size_t n_cached() const { return cache_.size(); }

 private:
  explicit SuffixDrafter(const SuffixDrafterOptions& o) : opts_(o), trie_(o.max_tree_depth) {}
  SuffixDrafterOptions opts_;
  SuffixCountTrie trie_;
  std::deque<std::vector<int32_t>> cache_;  // the outputs in the trie, oldest first
};

}  // namespace rill::engine::spec
