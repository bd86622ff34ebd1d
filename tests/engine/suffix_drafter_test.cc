// SuffixDrafter (suffix decoding) against closed-form cases and, on random token streams over a small
// alphabet (so substrings repeat), against a brute-force oracle that scans every stream for each pattern
// and reads the rule off the counts; the count trie against direct substring counts, also after outputs
// leave the bounded cache.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "engine/spec/suffix_drafter.h"
#include "test_seed.h"

namespace rill::engine::spec {
namespace {

using Tokens = std::vector<int32_t>;

std::unique_ptr<SuffixDrafter> make(SuffixDrafterOptions o = {}) {
  auto d = SuffixDrafter::create(o);
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return std::move(d).value();
}

// How often `p` occurs in `s` followed by each token (end positions e with s[e - |p|, e) == p and e < |s|).
void count_continuations(const Tokens& s, const Tokens& p, std::map<int32_t, int64_t>& counts) {
  for (size_t e = p.size(); e < s.size(); ++e)
    if (std::equal(p.begin(), p.end(), s.begin() + long(e - p.size()))) counts[s[e]]++;
}

// The rule, by scanning: the longest suffix (at most depth - 1 tokens) that some stream continues; then
// repeatedly the most frequent continuation (smallest id on ties) of suffix + drafts over all streams, while
// it has at least min_prob of them, pattern + draft within the depth and at most factor x match tokens.
Tokens oracle(const Tokens& ctx, const std::vector<Tokens>& outputs, const SuffixDrafterOptions& o, int k) {
  const int64_t L = int64_t(ctx.size()), D = o.max_tree_depth;
  if (k <= 0) return {};
  auto continuations = [&](const Tokens& p) {
    std::map<int32_t, int64_t> counts;
    count_continuations(ctx, p, counts);
    for (const Tokens& out : outputs) count_continuations(out, p, counts);
    return counts;
  };
  int64_t match = 0;
  for (int64_t m = std::min(D - 1, L); m >= 1; --m)
    if (!continuations(Tokens(ctx.end() - m, ctx.end())).empty()) {
      match = m;
      break;
    }
  if (match == 0) return {};
  const int64_t n_max = std::min({int64_t(k), int64_t(std::floor(o.max_spec_factor * double(match))), D - match});
  Tokens pattern(ctx.end() - match, ctx.end()), draft;
  while (int64_t(draft.size()) < n_max) {
    const auto counts = continuations(pattern);
    if (counts.empty()) break;
    int64_t total = 0, best_n = 0;
    int32_t best = 0;
    for (const auto& [t, n] : counts) {
      total += n;
      if (n > best_n) best = t, best_n = n;
    }
    if (double(best_n) < o.min_token_prob * double(total)) break;
    draft.push_back(best);
    pattern.push_back(best);
  }
  return draft;
}

TEST(SuffixDrafter, ClosedFormCases) {
  // The request's own context: "1 2" was followed by 3, 4, 5.
  EXPECT_EQ(make()->propose(Tokens{1, 2, 3, 4, 5, 1, 2}, 3), (Tokens{3, 4}));  // factor 1 x match 2
  SuffixDrafterOptions wide;
  wide.max_spec_factor = 4;
  EXPECT_EQ(make(wide)->propose(Tokens{1, 2, 3, 4, 5, 1, 2}, 3), (Tokens{3, 4, 5}));
  // The most frequent continuation: "7" was followed by 8 twice and 9 once -> 8; then "7 8" by 1 and 2
  // once each -> 1 (a tie: the smallest id).
  EXPECT_EQ(make(wide)->propose(Tokens{7, 8, 1, 7, 8, 2, 7, 9, 3, 7}, 2), (Tokens{8, 1}));
  // The longest match wins over a more frequent shorter one: "5 6" -> 1 (once), though "6" -> 2 twice.
  EXPECT_EQ(make(wide)->propose(Tokens{5, 6, 1, 6, 2, 6, 2, 5, 6}, 1), (Tokens{1}));
  // min_token_prob: continuations 8, 9, 10 each a third; with 0.5 nothing is drafted.
  SuffixDrafterOptions picky = wide;
  picky.min_token_prob = 0.5;
  EXPECT_TRUE(make(picky)->propose(Tokens{7, 8, 7, 9, 7, 10, 7}, 2).empty());
  EXPECT_EQ(make(wide)->propose(Tokens{7, 8, 7, 9, 7, 10, 7}, 1), (Tokens{8}));  // a tie: the smallest id
  // Nothing repeats: no draft; no context, no tokens asked: none.
  EXPECT_TRUE(make()->propose(Tokens{1, 2, 3, 4}, 4).empty());
  EXPECT_TRUE(make()->propose(Tokens{}, 4).empty());
  EXPECT_TRUE(make()->propose(Tokens{3, 3, 3}, 0).empty());
  // Recent outputs: a new request whose context ends like an earlier output drafts its continuation.
  auto d = make(wide);
  d->observe_finished(Tokens{100}, Tokens{40, 41, 42, 43, 44});
  EXPECT_EQ(d->propose(Tokens{9, 9, 40, 41}, 3), (Tokens{42, 43, 44}));
  // ... counted together with the context's own occurrences: 41 -> 50 twice in the context beats the cache.
  EXPECT_EQ(d->propose(Tokens{41, 50, 41, 50, 2, 41}, 1), (Tokens{50}));
  // The cache is bounded: with one output kept, the older one is gone.
  SuffixDrafterOptions one = wide;
  one.max_cached_requests = 1;
  auto e = make(one);
  e->observe_finished({}, Tokens{40, 41, 42});
  e->observe_finished({}, Tokens{60, 61, 62});
  EXPECT_EQ(e->n_cached(), 1u);
  EXPECT_TRUE(e->propose(Tokens{9, 40, 41}, 2).empty());
  EXPECT_EQ(e->propose(Tokens{9, 60, 61}, 2), (Tokens{62}));
  // The depth bounds match + draft: depth 3 allows a match of 2 and one draft token.
  SuffixDrafterOptions shallow = wide;
  shallow.max_tree_depth = 3;
  EXPECT_EQ(make(shallow)->propose(Tokens{1, 2, 3, 4, 5, 1, 2}, 3), (Tokens{3}));
}

TEST(SuffixDrafter, BadOptionsNameTheKeys) {
  const std::pair<SuffixDrafterOptions, const char*> cases[] = {
      {{.max_tree_depth = 1}, "suffix_decoding_max_tree_depth"},
      {{.max_cached_requests = -1}, "suffix_decoding_max_cached_requests"},
      {{.min_token_prob = 1.5}, "suffix_decoding_min_token_prob"},
      {{.max_spec_factor = 0}, "suffix_decoding_max_spec_factor"},
  };
  for (const auto& [o, key] : cases) {
    auto d = SuffixDrafter::create(o);
    ASSERT_FALSE(d.ok()) << key;
    EXPECT_NE(d.status().message().find(key), std::string::npos) << d.status().message();
  }
}

TEST(SuffixDrafter, CountTrieCountsEverySubstring) {
  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const int depth = 4;
  SuffixCountTrie trie(depth);
  std::vector<Tokens> streams;
  for (int i = 0; i < 6; ++i) {
    Tokens s(size_t(rng() % 30));
    for (int32_t& t : s) t = int32_t(rng() % 3);
    trie.add(s);
    streams.push_back(s);
  }
  for (int removed = 0; removed < 4; ++removed) {
    // Every string over the alphabet of length 1..depth: the trie's count is the number of occurrences.
    for (int len = 1; len <= depth; ++len)
      for (int code = 0; code < 81; ++code) {
        Tokens p;
        for (int i = 0, c = code; i < len; ++i, c /= 3) p.push_back(c % 3);
        if (code >= int(std::pow(3, len))) break;
        int64_t want = 0;
        for (const Tokens& s : streams)
          for (size_t e = p.size(); e <= s.size(); ++e)
            want += std::equal(p.begin(), p.end(), s.begin() + long(e - p.size()));
        const SuffixCountTrie::Node* n = trie.find(p);
        ASSERT_EQ(n ? n->count : 0, want) << "length " << len << " code " << code << " removed " << removed;
      }
    trie.remove(streams.front());
    streams.erase(streams.begin());
  }
}

TEST(SuffixDrafter, MatchesTheOracleOnRandomStreams) {
  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  int drafted = 0, from_cache = 0;
  for (int trial = 0; trial < 300; ++trial) {
    SuffixDrafterOptions o;
    o.max_tree_depth = 2 + int(rng() % 8);
    o.max_cached_requests = int(rng() % 4);
    o.min_token_prob = (rng() % 4) * 0.15;
    o.max_spec_factor = 0.5 + (rng() % 6) * 0.5;
    const int alphabet = 2 + int(rng() % 5), k = int(rng() % 7);
    auto d = make(o);
    std::vector<Tokens> outputs;  // what the drafter should still hold
    const int n_outputs = int(rng() % 6);
    for (int i = 0; i < n_outputs; ++i) {
      Tokens out(size_t(rng() % 25));
      for (int32_t& t : out) t = int32_t(rng() % uint32_t(alphabet));
      d->observe_finished({}, out);
      if (o.max_cached_requests > 0 && !out.empty()) outputs.push_back(out);
      if (int(outputs.size()) > o.max_cached_requests) outputs.erase(outputs.begin());
    }
    Tokens ctx(size_t(rng() % 40));
    for (int32_t& t : ctx) t = int32_t(rng() % uint32_t(alphabet));
    const Tokens want = oracle(ctx, outputs, o, k), got = d->propose(ctx, k);
    drafted += !want.empty();
    from_cache += !want.empty() && oracle(ctx, {}, o, k) != want;
    ASSERT_EQ(got, want) << "trial " << trial << " depth " << o.max_tree_depth << " cached " << outputs.size()
                         << " min_prob " << o.min_token_prob << " factor " << o.max_spec_factor << " k " << k;
  }
  EXPECT_GT(drafted, 100) << "the streams should repeat often enough to exercise the matches";
  EXPECT_GT(from_cache, 10) << "the cached outputs should change some drafts";
}

}  // namespace
}  // namespace rill::engine::spec
