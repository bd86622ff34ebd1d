// PrefixIndex: a match is the exact token prefix even when hashes collide (a deliberately weak hash);
// eviction takes the least recently used unreferenced chain end and never a held block; idle counts stay
// exact.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "cache/prefix_index.h"
#include "test_seed.h"

namespace rill::cache {
namespace {

constexpr int kBlock = 4;

std::vector<int32_t> blk(std::initializer_list<int32_t> v) {
  return std::vector<int32_t>(v);
}

// Caches `tokens`' full blocks the way CacheManager::commit does: share what is there, add what is not, stop
// at a hash collision. Returns the chain it holds.
std::vector<PrefixIndex::EntryId> add_chain(PrefixIndex& ix, const std::vector<int32_t>& tokens,
                                            int32_t* next_block) {
  std::vector<PrefixIndex::EntryId> chain;
  for (size_t b = 0; (b + 1) * kBlock <= tokens.size(); ++b) {
    const std::span<const int32_t> t(tokens.data() + b * kBlock, kBlock);
    const PrefixIndex::EntryId parent = chain.empty() ? 0 : chain.back();
    PrefixIndex::EntryId id = ix.find(parent, t);
    if (id) {
      ix.acquire(std::span(&id, 1));
    } else {
      id = ix.insert(parent, t, (*next_block)++);
      if (!id) break;
    }
    chain.push_back(id);
  }
  return chain;
}

TEST(PrefixIndex, MatchIsTheExactTokenPrefix) {
  PrefixIndex ix;
  int32_t next = 0;
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const auto chain = add_chain(ix, a, &next);
  ASSERT_EQ(chain.size(), 3u);
  EXPECT_EQ(ix.match(a, kBlock, 10), chain);
  EXPECT_EQ(ix.match(a, kBlock, 2).size(), 2u);  // capped
  auto b = a;
  b[9] = 99;  // third block differs
  EXPECT_EQ(ix.match(b, kBlock, 10), std::vector<PrefixIndex::EntryId>(chain.begin(), chain.begin() + 2));
  b = a;
  b[0] = 99;
  EXPECT_TRUE(ix.match(b, kBlock, 10).empty());
  // The same block after another parent is another entry.
  const std::vector<int32_t> c = {5, 6, 7, 8};
  EXPECT_TRUE(ix.match(c, kBlock, 10).empty());
  EXPECT_EQ(ix.find(0, blk({1, 2, 3, 4})), chain[0]);
  EXPECT_EQ(ix.find(chain[0], blk({1, 2, 3, 4})), 0u);
}

// A hash that only sees the first token of a block: collisions everywhere. Every match must still equal the
// longest prefix that an independent record of the cached chains says is there.
uint64_t weak_hash(uint64_t parent_hash, std::span<const int32_t> tokens) {
  return parent_hash * 31 + uint64_t(tokens[0]);
}

TEST(PrefixIndex, CollidingHashesNeverMatchOtherTokens) {
  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  PrefixIndex ix(&weak_hash);
  int32_t next = 0;
  std::map<std::vector<int32_t>, PrefixIndex::EntryId>
      cached;  // block-aligned prefix -> entry of its last block
  std::vector<std::vector<int32_t>> seqs;
  auto random_seq = [&] {
    std::vector<int32_t> t;
    if (!seqs.empty() && rng() % 2) {  // continue a random prefix of an earlier one
      const auto& o = seqs[rng() % seqs.size()];
      t.assign(o.begin(), o.begin() + long(rng() % (o.size() + 1)));
    }
    const size_t len = t.size() + rng() % 20;
    while (t.size() < len) t.push_back(int32_t(rng() % 3));  // a 3-token alphabet: many equal first tokens
    return t;
  };
  for (int i = 0; i < 200; ++i) {
    const auto t = random_seq();
    seqs.push_back(t);
    const auto chain = add_chain(ix, t, &next);
    for (size_t b = 0; b < chain.size(); ++b)
      cached[std::vector<int32_t>(t.begin(), t.begin() + long((b + 1) * kBlock))] = chain[b];
    ASSERT_TRUE(ix.release(chain).ok());
  }
  for (int i = 0; i < 300; ++i) {
    const auto q = random_seq();
    const auto m = ix.match(q, kBlock, 1000);
    size_t want = 0;  // the longest cached block-aligned prefix of q
    while ((want + 1) * kBlock <= q.size() &&
           cached.count(std::vector<int32_t>(q.begin(), q.begin() + long((want + 1) * kBlock))))
      ++want;
    ASSERT_EQ(m.size(), want) << "query " << i;
    for (size_t b = 0; b < m.size(); ++b) {
      EXPECT_EQ(m[b], cached.at(std::vector<int32_t>(q.begin(), q.begin() + long((b + 1) * kBlock))));
      EXPECT_TRUE(std::equal(ix.entry(m[b]).tokens.begin(), ix.entry(m[b]).tokens.end(),
                             q.begin() + long(b * kBlock)));
    }
  }
}

TEST(PrefixIndex, EvictsLeastRecentlyUsedChainEndsAndNeverHeldBlocks) {
  PrefixIndex ix;
  int32_t next = 0;
  const auto x = add_chain(ix, {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}, &next);  // blocks 0 1 2
  const auto y = add_chain(ix, {1, 1, 1, 1, 5, 5, 5, 5}, &next);              // shares x[0]; block 3
  ASSERT_EQ(y.size(), 2u);
  EXPECT_EQ(y[0], x[0]);
  EXPECT_EQ(ix.n_idle(), 0);
  EXPECT_FALSE(ix.evict_one());  // everything is held
  ASSERT_TRUE(ix.release(x).ok());
  EXPECT_EQ(ix.n_idle(), 2);  // x[1], x[2]; x[0] is still held by y
  auto e = ix.evict_one();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->block, 2);  // the chain's end goes first
  e = ix.evict_one();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->block, 1);
  EXPECT_FALSE(ix.evict_one());  // x[0] and y[1] are held by y
  ASSERT_TRUE(ix.release(y).ok());
  EXPECT_EQ(ix.n_idle(), 2);
  ix.set_snapshot(y[1], 7);
  e = ix.evict_one();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->block, 3);
  EXPECT_EQ(e->snapshot, 7);
  e = ix.evict_one();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->block, 0);
  EXPECT_EQ(ix.n_entries(), 0);
  EXPECT_EQ(ix.n_idle(), 0);
  // Least recently used first: a chain released earlier goes before one released later, and using it again
  // (acquire + release) makes it the most recent.
  const auto p = add_chain(ix, {7, 7, 7, 7}, &next), q = add_chain(ix, {8, 8, 8, 8}, &next);
  ASSERT_TRUE(ix.release(p).ok());
  ASSERT_TRUE(ix.release(q).ok());
  ix.acquire(p);
  ASSERT_TRUE(ix.release(p).ok());
  e = ix.evict_one();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->block, 5);  // q's block
}

// A release beyond the holds (a double release) is a bookkeeping bug: reported as Internal, and the refused
// call changes nothing, so no count goes below zero and no held block becomes evictable.
TEST(PrefixIndex, ReleasingMoreThanHeldIsAnInternalErrorAndChangesNothing) {
  PrefixIndex ix;
  int32_t next = 0;
  const auto x = add_chain(ix, {1, 1, 1, 1, 2, 2, 2, 2}, &next);  // two entries, held once
  ASSERT_TRUE(ix.release(x).ok());
  EXPECT_EQ(ix.n_idle(), 2);
  const Status twice = ix.release(x);
  EXPECT_EQ(twice.code(), StatusCode::Internal);
  EXPECT_NE(twice.message().find("released but not held"), std::string::npos) << twice.message();
  EXPECT_EQ(ix.entry(x[0]).refs, 0);
  EXPECT_EQ(ix.n_idle(), 2);
  ix.acquire(std::span(&x[1], 1));  // held once again
  const std::vector<PrefixIndex::EntryId> x1_twice = {x[1], x[1]};
  EXPECT_EQ(ix.release(x1_twice).code(), StatusCode::Internal);  // two releases of one hold in one call
  EXPECT_EQ(ix.entry(x[1]).refs, 1);
  EXPECT_EQ(ix.n_idle(), 1);
  EXPECT_EQ(ix.release(std::vector<PrefixIndex::EntryId>{999}).code(),
            StatusCode::Internal);  // no such entry
  EXPECT_TRUE(ix.release(std::span(&x[1], 1)).ok());
  EXPECT_EQ(ix.n_idle(), 2);
}

}  // namespace
}  // namespace rill::cache
