// runner::copy_waves against running the copies one after another: random copy lists over a few slots (so
// chains, swaps through a third slot and repeated targets are common), each wave run in REVERSE order — any
// order must do, since a batch's copies are unordered — must leave every slot as the sequential run does.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

#include "runner/model_runner.h"
#include "test_seed.h"

namespace rill::runner {
namespace {

TEST(CopyWaves, AnyOrderInsideAWaveEqualsTheCopiesInOrder) {
  const uint32_t seed = testing::test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n_slots = 2 + int(rng() % 6), n_copies = int(rng() % 12);
    std::vector<cache::KdaSlotCopy> copies;
    for (int i = 0; i < n_copies; ++i) copies.push_back({int32_t(rng() % n_slots), int32_t(rng() % n_slots)});
    std::vector<int> sequential(static_cast<size_t>(n_slots), 0), waved = sequential;
    for (int s = 0; s < n_slots; ++s) sequential[size_t(s)] = waved[size_t(s)] = 100 + s;
    for (const auto& c : copies) sequential[size_t(c.to)] = sequential[size_t(c.from)];
    size_t kept = 0;
    for (const auto& wave : copy_waves(copies)) {
      ASSERT_FALSE(wave.empty());
      std::set<int32_t> written;
      for (auto it = wave.rbegin(); it != wave.rend(); ++it) {
        EXPECT_NE(it->from, it->to);
        EXPECT_TRUE(written.insert(it->to).second) << "two copies into slot " << it->to << " in one wave";
        waved[size_t(it->to)] = waved[size_t(it->from)];
      }
      kept += wave.size();
    }
    size_t non_trivial = 0;
    for (const auto& c : copies) non_trivial += c.from != c.to;
    EXPECT_EQ(kept, non_trivial);
    ASSERT_EQ(waved, sequential) << "trial " << trial;
  }
}

// Independent copies (a step's checkpoints: every slot to its own checkpoint) make one wave.
TEST(CopyWaves, IndependentCopiesAreOneWave) {
  std::vector<cache::KdaSlotCopy> copies;
  for (int s = 0; s < 64; ++s) copies.push_back({s, 64 + s});
  EXPECT_EQ(copy_waves(copies).size(), 1u);
  copies.push_back({64, 3});  // reads a slot the wave writes: a second wave
  EXPECT_EQ(copy_waves(copies).size(), 2u);
}

}  // namespace
}  // namespace rill::runner
