#include "engine/spec/suffix_drafter.h"

#include <algorithm>
#include <cmath>

namespace rill::engine::spec {
namespace {

size_t subtree_size(const SuffixCountTrie::Node& n) {
  size_t s = 1;
  for (const auto& [t, c] : n.children) s += subtree_size(*c);
  return s;
}

}  // namespace

// Every substring of at most depth_ tokens, by its start: one path per start position.
void SuffixCountTrie::update(std::span<const int32_t> stream, int delta) {
  const size_t n = stream.size(), depth = size_t(depth_);
  for (size_t i = 0; i < n; ++i) {
    Node* node = &root_;
    for (size_t j = i; j < std::min(n, i + depth); ++j) {
      auto it = node->children.find(stream[j]);
      if (it == node->children.end()) {
        if (delta < 0) break;  // not there: a stream removed that was never added
        it = node->children.emplace(stream[j], std::make_unique<Node>()).first;
        ++n_nodes_;
      }
      it->second->count += delta;
      // A string that no longer occurs: neither does anything below it (a longer string occurs at most as
      // often as its prefix).
      if (it->second->count <= 0) {
        n_nodes_ -= subtree_size(*it->second);
        node->children.erase(it);
        break;
      }
      node = it->second.get();
    }
  }
}

const SuffixCountTrie::Node* SuffixCountTrie::find(std::span<const int32_t> s) const {
  if (int64_t(s.size()) > depth_) return nullptr;
  const Node* node = &root_;
  for (int32_t t : s) {
    auto it = node->children.find(t);
    if (it == node->children.end()) return nullptr;
    node = it->second.get();
  }
  return node;
}

Result<std::unique_ptr<SuffixDrafter>> SuffixDrafter::create(const SuffixDrafterOptions& o) {
  constexpr const char* kWhere = "--speculative-config";
  if (o.max_tree_depth < 2 || o.max_tree_depth > 1024)
    return invalid_argument("{}: \"suffix_decoding_max_tree_depth\" {} must be in [2, 1024]", kWhere,
                            o.max_tree_depth);
  if (o.max_cached_requests < 0)
    return invalid_argument("{}: \"suffix_decoding_max_cached_requests\" {} must be at least 0", kWhere,
                            o.max_cached_requests);
  if (!(o.min_token_prob >= 0 && o.min_token_prob <= 1))
    return invalid_argument("{}: \"suffix_decoding_min_token_prob\" {} must be in [0, 1]", kWhere,
                            o.min_token_prob);
  if (!(o.max_spec_factor > 0) || !std::isfinite(o.max_spec_factor))
    return invalid_argument("{}: \"suffix_decoding_max_spec_factor\" {} must be positive", kWhere,
                            o.max_spec_factor);
  return std::unique_ptr<SuffixDrafter>(new SuffixDrafter(o));
}

std::vector<int32_t> SuffixDrafter::propose(std::span<const int32_t> context, int max_tokens) const {
  const int64_t L = int64_t(context.size()), D = opts_.max_tree_depth;
  if (max_tokens <= 0 || L == 0) return {};
  // A pattern and its continuation fit the tree's depth: matches of at most D - 1 tokens.
  const int64_t max_match = std::min(D - 1, L);
  // lcs[e]: how many tokens before end position e (exclusive) equal the context's last ones (at most
  // max_match); e < L, so context[e] continues that occurrence. Mismatches are immediate for most e: ~O(L).
  std::vector<int64_t> lcs(size_t(L), 0);
  int64_t own = 0;
  for (int64_t e = 1; e < L; ++e) {
    int64_t n = 0;
    while (n < max_match && n < e && context[size_t(e - 1 - n)] == context[size_t(L - 1 - n)]) ++n;
    lcs[size_t(e)] = n;
    own = std::max(own, n);
  }
  int64_t cached = 0;
  for (int64_t m = max_match; m > own; --m) {
    const SuffixCountTrie::Node* node = trie_.find(context.subspan(size_t(L - m)));
    if (node && !node->children.empty()) {
      cached = m;
      break;
    }
  }
  const int64_t match = std::max(own, cached);
  if (match == 0) return {};
  const int64_t n_max = std::min({int64_t(max_tokens), int64_t(std::floor(opts_.max_spec_factor * double(match))),
                                  D - match});
  // The walk: the occurrences' end positions in the context and the trie node of the pattern.
  std::vector<int64_t> ends;
  for (int64_t e = 1; e < L; ++e)
    if (lcs[size_t(e)] >= match) ends.push_back(e);
  const SuffixCountTrie::Node* node = trie_.find(context.subspan(size_t(L - match)));
  std::vector<int32_t> draft;
  std::map<int32_t, int64_t> counts;
  while (int64_t(draft.size()) < n_max) {
    counts.clear();
    for (int64_t e : ends) counts[context[size_t(e)]]++;
    if (node)
      for (const auto& [t, child] : node->children) counts[t] += child->count;
    if (counts.empty()) break;
    int64_t total = 0;
    auto best = counts.begin();
    for (auto it = counts.begin(); it != counts.end(); ++it) {
      total += it->second;
      if (it->second > best->second) best = it;  // ties: the smallest id (map order)
    }
    if (double(best->second) < opts_.min_token_prob * double(total)) break;
    const int32_t t = best->first;
    draft.push_back(t);
    std::vector<int64_t> next;
    for (int64_t e : ends)
      if (context[size_t(e)] == t && e + 1 < L) next.push_back(e + 1);
    ends.swap(next);
    if (node) {
      auto it = node->children.find(t);
      node = it == node->children.end() ? nullptr : it->second.get();
    }
  }
  return draft;
}

void SuffixDrafter::observe_finished(std::span<const int32_t> /*prompt*/, std::span<const int32_t> output) {
  if (opts_.max_cached_requests == 0 || output.empty()) return;
  cache_.emplace_back(output.begin(), output.end());
  trie_.add(cache_.back());
  while (int64_t(cache_.size()) > opts_.max_cached_requests) {
    trie_.remove(cache_.front());
    cache_.pop_front();
  }
}

}  // namespace rill::engine::spec
