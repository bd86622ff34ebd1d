// NgramDrafter (prompt lookup) against closed-form cases and, on random token streams over a small alphabet
// (so n-grams repeat), against an oracle that builds every n-gram's occurrence list and reads the rule off
// it.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "engine/spec/ngram_drafter.h"
#include "test_seed.h"

namespace rill::engine::spec {
namespace {

using Tokens = std::vector<int32_t>;

Tokens draft(int min_n, int max_n, const Tokens& ctx, int k) {
  auto d = NgramDrafter::create(min_n, max_n);
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return d->propose(ctx, k);
}

TEST(NgramDrafter, ClosedFormCases) {
  // "a b c d ... a b" -> the tokens after the earlier "a b".
  EXPECT_EQ(draft(1, 3, {1, 2, 3, 4, 5, 1, 2}, 3), (Tokens{3, 4, 5}));
  // k larger than what follows: cut at the end of the context (the continuation runs into the suffix).
  EXPECT_EQ(draft(1, 3, {1, 2, 3, 1, 2}, 8), (Tokens{3, 1, 2}));
  // A repeating pattern: the nearest earlier period is followed by one more before the context ends.
  EXPECT_EQ(draft(2, 2, {7, 8, 7, 8, 7, 8}, 4), (Tokens{7, 8}));
  EXPECT_EQ(draft(2, 2, {7, 8, 9, 7, 8, 9, 7, 8}, 4), (Tokens{9, 7, 8}));
  // The longest n wins over a more recent shorter match: "2 3" occurs at 1 and 4, "1 2 3" only at 0.
  EXPECT_EQ(draft(1, 3, {1, 2, 3, 9, 2, 3, 8, 1, 2, 3}, 2), (Tokens{9, 2}));
  // For one n, the most recent earlier occurrence.
  EXPECT_EQ(draft(2, 2, {5, 6, 1, 5, 6, 2, 5, 6}, 1), (Tokens{2}));
  // No earlier occurrence of any suffix in [min, max]: no draft.
  EXPECT_TRUE(draft(2, 4, {1, 2, 3, 4, 5, 6}, 4).empty());
  EXPECT_TRUE(draft(1, 4, {1}, 4).empty());
  EXPECT_TRUE(draft(1, 4, {}, 4).empty());
  EXPECT_TRUE(draft(1, 4, {3, 3, 3}, 0).empty());
  // min_n bounds the match: "4" repeats but is shorter than 2.
  EXPECT_TRUE(draft(2, 3, {4, 1, 2, 4}, 2).empty());
  EXPECT_EQ(draft(1, 3, {4, 1, 2, 4}, 2), (Tokens{1, 2}));
}

TEST(NgramDrafter, BadConfigNamesTheKeys) {
  auto a = NgramDrafter::create(0, 3);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("prompt_lookup_min 0"), std::string::npos) << a.status().message();
  auto b = NgramDrafter::create(3, 2);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("prompt_lookup_max 2 must be at least prompt_lookup_min 3"),
            std::string::npos)
      << b.status().message();
}

// The oracle: every n-gram's start positions (a map from the n tokens), the largest n whose suffix has a
// start before the suffix's own, the latest such start.
Tokens oracle(int min_n, int max_n, const Tokens& ctx, int k) {
  const int L = int(ctx.size());
  for (int n = max_n; n >= min_n; --n) {
    if (n >= L) continue;
    std::map<Tokens, std::vector<int>> starts;
    for (int i = 0; i + n <= L; ++i) starts[Tokens(ctx.begin() + i, ctx.begin() + i + n)].push_back(i);
    const std::vector<int>& at = starts[Tokens(ctx.end() - n, ctx.end())];
    int best = -1;
    for (int s : at)
      if (s < L - n) best = std::max(best, s);
    if (best < 0) continue;
    Tokens out;
    for (int i = best + n; i < L && int(out.size()) < k; ++i) out.push_back(ctx[i]);
    return out;
  }
  return {};
}

TEST(NgramDrafter, MatchesTheOracleOnRandomStreams) {
  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  int drafted = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int alphabet = 2 + int(rng() % 6), len = int(rng() % 60);
    const int min_n = 1 + int(rng() % 3), max_n = min_n + int(rng() % 4), k = int(rng() % 7);
    Tokens ctx(static_cast<size_t>(len));
    for (int32_t& t : ctx) t = int32_t(rng() % uint32_t(alphabet));
    const Tokens want = oracle(min_n, max_n, ctx, k), got = draft(min_n, max_n, ctx, k);
    drafted += !want.empty();
    ASSERT_EQ(got, want) << "trial " << trial << " len " << len << " alphabet " << alphabet << " n [" << min_n
                         << ", " << max_n << "] k " << k;
  }
  EXPECT_GT(drafted, 100) << "the streams should repeat often enough to exercise the matches";
}

}  // namespace
}  // namespace rill::engine::spec
