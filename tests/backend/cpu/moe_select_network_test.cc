// The decode router's block selection (src/backend/cuda/moe/select_network.h, route.cu
// moe_select_wide_kernel) run on the host: 8 warps of 32 lanes held in arrays, each warp's bitonic sort of
// its keys, warp 0's three merge rounds of the warps' best eight, exactly as the kernel's shuffles exchange
// keys. Against a brute-force top-k by the same key order over random keys with ties, -0 and +0, NaN scores
// and experts past E: the first top_k lanes must hold the best top_k keys in order.
#include <gtest/gtest.h>

#include <array>
#include <climits>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/moe/select_network.h"
#include "test_seed.h"

namespace rill::cuda::moe {
namespace {

using Key = std::pair<float, int>;  // (score + bias, expert id)
using Warp = std::array<Key, 32>;

bool better(const Key& a, const Key& b) {
  return select_better(a.first, a.second, b.first, b.second);
}

// One compare-exchange step of a network across a warp's lanes (the kernel's bitonic_exchange on each lane):
// lane l reads lane partner(l)'s key and keeps the better or the other one.
template <typename Partner, typename KeepsBetter>
void exchange(Warp& w, Partner partner, KeepsBetter keeps_better) {
  const Warp before = w;
  for (int lane = 0; lane < 32; ++lane) {
    const Key& mine = before[size_t(lane)];
    const Key& theirs = before[size_t(partner(lane))];
    if (keeps_better(lane) ? better(theirs, mine) : better(mine, theirs)) w[size_t(lane)] = theirs;
  }
}

void merge8(Warp& w) {
  for (int j = 4; j > 0; j >>= 1)
    exchange(
        w, [j](int l) { return l ^ j; }, [j](int l) { return merge8_keeps_better(l, j); });
}

// The kernel's choices: keys (an expert a thread, ids past E and NaN scores as (-inf, INT_MAX)), the warps'
// sorts, the candidates, warp 0's rounds; lane j < top_k holds choice j.
Warp select(const std::vector<Key>& keys) {
  std::array<Key, kSelectWideCandidates> cand{};
  for (int warp = 0; warp < kSelectWideThreads / 32; ++warp) {
    Warp w;
    for (int lane = 0; lane < 32; ++lane) w[size_t(lane)] = keys[size_t(warp * 32 + lane)];
    for (int k = 2; k <= 32; k <<= 1)
      for (int j = k >> 1; j > 0; j >>= 1)
        exchange(
            w, [j](int l) { return l ^ j; }, [k, j](int l) { return sort32_keeps_better(l, k, j); });
    for (int lane = 0; lane < kSelectWideTopK; ++lane)
      cand[size_t(warp * kSelectWideTopK + lane)] = w[size_t(lane)];
  }
  Warp w;
  for (int lane = 0; lane < 32; ++lane) {
    w[size_t(lane)] = cand[size_t(lane)];
    const Key& o = cand[size_t(select_first_partner(lane))];
    if (better(o, w[size_t(lane)])) w[size_t(lane)] = o;
  }
  merge8(w);
  for (int m = 1; m <= 2; m <<= 1) {
    const Warp before = w;
    for (int lane = 0; lane < 32; ++lane) {
      const Key& o = before[size_t(select_merge_partner(lane, m))];
      if (better(o, w[size_t(lane)])) w[size_t(lane)] = o;
    }
    merge8(w);
  }
  return w;
}

TEST(MoeSelectNetwork, ChoosesTheBruteForceTopKInOrder) {
  const uint32_t seed = rill::testing::test_seed();  // RILL_TEST_SEED replays
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int round = 0; round < 400; ++round) {
    const int E =
        round % 5 == 0 ? kSelectWideThreads : std::uniform_int_distribution<int>(1, kSelectWideThreads)(rng);
    const int shape = round % 4;  // continuous scores, few distinct values (ties), signed zeros, NaN and -inf
    std::vector<Key> keys(static_cast<size_t>(kSelectWideThreads));
    for (int e = 0; e < kSelectWideThreads; ++e) {
      float x = std::uniform_real_distribution<float>(0.0f, 2.0f)(rng);
      const int r = std::uniform_int_distribution<int>(0, 9)(rng);
      if (shape == 1) x = float(r % 3) * 0.5f;
      if (shape == 2) x = r < 5 ? (r % 2 ? -0.0f : 0.0f) : x;
      if (shape == 3) x = r == 0 ? NAN : r == 1 ? -INFINITY : x;
      const bool ok = e < E && !std::isnan(x);  // the kernel's mapping
      keys[size_t(e)] = ok ? Key{x, e} : Key{-INFINITY, INT_MAX};
    }
    const Warp got = select(keys);
    std::vector<Key> left = keys;  // brute force: the best remaining key, top_k times
    SCOPED_TRACE("round " + std::to_string(round) + " E " + std::to_string(E));
    for (int j = 0; j < kSelectWideTopK; ++j) {
      size_t best = 0;
      for (size_t i = 1; i < left.size(); ++i)
        if (better(left[i], left[best])) best = i;
      ASSERT_EQ(got[size_t(j)].second, left[best].second) << "choice " << j;
      ASSERT_EQ(std::signbit(got[size_t(j)].first), std::signbit(left[best].first)) << "choice " << j;
      if (!std::isinf(left[best].first) || left[best].first > 0) {
        ASSERT_EQ(got[size_t(j)].first, left[best].first) << "choice " << j;
      }
      left.erase(left.begin() + std::ptrdiff_t(best));
    }
  }
}

}  // namespace
}  // namespace rill::cuda::moe
