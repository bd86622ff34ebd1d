// CacheManager with prefix caching on the CPU backend, without a model: "steps" write a value that stands for
// the exact token prefix into the MLA cache (per position) and the KDA slot (the state after it), so every
// prefix hit can be checked to restore exactly the state and blocks of the tokens it matched, also under a
// colliding hash and eviction pressure; held blocks are never written by others or evicted; and after the
// load everything evicts back to empty pools.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "cache/cache_manager.h"
#include "model/fixture.h"
#include "runner/model_runner.h"
#include "test_seed.h"

namespace rill::cache {
namespace {

// A value standing for a token prefix (exact in float: 24 bits).
float prefix_value(std::span<const int32_t> tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens) h = (h ^ uint64_t(uint32_t(t))) * 1099511628211ull;
  return float((h >> 40) & 0xffffff);
}

struct Caches {
  std::unique_ptr<backend::Backend> be = backend::make_cpu_backend();
  model::ModelConfig cfg = *model::ModelConfig::load(testing::data_dir() / "kimi_linear_tiny_a");
  std::unique_ptr<CacheManager> cm;
  model::ModelCaches storage;  // what a runner would own: the manager's copies are applied to it by `apply`
  runner::HostTier host;        // the host tier's memory, when the plan has one
  std::filesystem::path disk_dir;
  std::unique_ptr<runner::DiskTier> disk;  // a disk tier below the host tier, when asked for

  Caches(int slots, int blocks, int snapshots, int interval, PrefixIndex::HashFn hash = nullptr,
         int host_blocks = 0, int host_snapshots = 0, bool with_disk = false) {
    auto s = model::ModelCaches::allocate(*be, cfg, slots + snapshots, blocks);  // only to size the host tier
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    MemoryPlan p;
    p.n_slots = slots;
    p.n_blocks = blocks;
    p.n_snapshots = snapshots;
    if (host_blocks > 0) {
      host.n_blocks = p.n_host_blocks = host_blocks;
      host.n_snapshots = p.n_host_snapshots = host_snapshots;
      host.block_bytes = runner::HostTier::block_bytes_of(*s);
      host.snapshot_bytes = runner::HostTier::snapshot_bytes_of(*s);
      p.host_block_bytes = int64_t(host.block_bytes);
      p.host_snapshot_bytes = int64_t(host.snapshot_bytes);
      auto mem = be->allocate_host(host.block_bytes * size_t(host_blocks) + host.snapshot_bytes * size_t(host_snapshots));
      EXPECT_TRUE(mem.ok()) << mem.status().to_string();
      host.memory = std::move(mem).value();
    }
    if (with_disk) {
      static int n = 0;
      disk_dir = std::filesystem::temp_directory_path() /
                 ("rill_cache_disk_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
      std::filesystem::remove_all(disk_dir);
      runner::DiskTierOptions d;
      d.dir = disk_dir;
      auto t = runner::DiskTier::open(d, 1, host.block_bytes, host.snapshot_bytes);
      EXPECT_TRUE(t.ok()) << t.status().to_string();
      disk = std::move(t).value();
      p.disk_tier = true;
    }
    PrefixCacheOptions o;
    o.enabled = true;
    o.snapshot_interval = interval;
    o.block_hash = hash;
    auto m = CacheManager::create(p, o);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    cm = std::make_unique<CacheManager>(std::move(m).value());
    s = model::ModelCaches::allocate(*be, cfg, CacheManager::state_slots_needed(p, o), blocks);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    storage = std::move(s).value();
  }
  ~Caches() {
    disk.reset();
    if (!disk_dir.empty()) std::filesystem::remove_all(disk_dir);
  }
  // Applies the slot copies the manager queued (as the runner does before each step).
  void apply() { ASSERT_TRUE(runner::apply_cache_ops(*be, storage, cm->take_ops(), &host, nullptr, disk.get()).ok()); }
  // What the engine does for a request about to be admitted: the disk part of its hit read into the host
  // tier (after the ops staging queued), or `fail`ed (as a corrupt file would).
  void stage_from_disk(std::span<const int32_t> tokens, bool fail) {
    auto loads = cm->stage_from_disk(tokens);
    ASSERT_TRUE(loads.ok()) << loads.status().to_string();
    if (loads->empty()) return;
    apply();
    std::vector<bool> ok;
    for (const DiskLoad& l : *loads) ok.push_back(!fail && disk->read(l.snapshot, l.hash, host.item(l.snapshot, l.host)).ok());
    ASSERT_TRUE(cm->finish_disk_loads(*loads, ok).ok());
  }
  // Every float of the slot's KDA state and conv window in every KDA layer.
  // Writing and reading the caches stands for a step: the copies queued since the last one run first.
  void set_state(int slot, float v) {
    apply();
    for (const auto& L : storage.layers)
      for (const TensorView* t : {&L.kda_state, &L.kda_conv}) {
        if (t->empty()) continue;
        const int64_t n = t->numel() / t->size(0);
        std::fill_n(t->ptr<float>() + slot * n, n, v);
      }
  }
  // The slot's value if all its floats agree, else NaN.
  float state(int slot) {
    apply();
    float v = -1;
    bool first = true;
    for (const auto& L : storage.layers)
      for (const TensorView* t : {&L.kda_state, &L.kda_conv}) {
        if (t->empty()) continue;
        const int64_t n = t->numel() / t->size(0);
        const float* p = t->ptr<float>() + slot * n;
        for (int64_t i = 0; i < n; ++i) {
          if (first) v = p[i], first = false;
          if (p[i] != v) return std::numeric_limits<float>::quiet_NaN();
        }
      }
    return v;
  }
  // Position p of a sequence: element 0 of its latent in every MLA layer.
  void set_kv(const SequenceCache& c, int p, float v) {
    apply();
    for (const auto& L : storage.layers)
      if (!L.mla_kv.empty())
        L.mla_kv.ptr<float>()[(int64_t(c.blocks[size_t(p / 64)]) * 64 + p % 64) * L.mla_kv.size(2)] = v;
  }
  float kv(const SequenceCache& c, int p) const {
    for (const auto& L : storage.layers)
      if (!L.mla_kv.empty())
        return L.mla_kv.ptr<float>()[(int64_t(c.blocks[size_t(p / 64)]) * 64 + p % 64) * L.mla_kv.size(2)];
    return -1;
  }
};

std::vector<int32_t> random_tokens(std::mt19937& rng, size_t n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % 512);
  return t;
}

TEST(CacheManager, PrefixHitRestoresTheStateAndBlocksOfExactlyTheMatchedTokens) {
  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  Caches s(8, 16, 8, 64);
  CacheManager& cm = *s.cm;
  const auto a = random_tokens(rng, 150);
  EXPECT_EQ(cm.next_snapshot_at(0, 150, 150), 64);
  EXPECT_EQ(cm.next_snapshot_at(70, 150, 150), 128);
  EXPECT_EQ(cm.next_snapshot_at(128, 150, 150), 150);
  EXPECT_EQ(cm.next_snapshot_at(0, 150, 150 + 40), 64);
  EXPECT_EQ(cm.next_snapshot_at(150, 150, 230), 192);  // a preempted sequence: its tokens' last boundary
  EXPECT_TRUE(cm.find_prefix(a).entries.empty());
  SequenceCache ca;
  ASSERT_TRUE(cm.admit(&ca, 64).ok());
  s.set_state(ca.slot, 64);
  ASSERT_TRUE(cm.commit(&ca, a, 150, 64).ok());
  ASSERT_TRUE(cm.grow(&ca, 128).ok());
  s.set_state(ca.slot, 128);
  ASSERT_TRUE(cm.commit(&ca, a, 150, 128).ok());
  ASSERT_TRUE(cm.grow(&ca, 150).ok());
  s.set_state(ca.slot, 150);
  ASSERT_TRUE(cm.commit(&ca, a, 150, 150).ok());
  EXPECT_EQ(cm.snapshots().used_count(), 2);
  EXPECT_EQ(cm.index().n_entries(), 2);

  auto resumed_at = [&](std::vector<int32_t> t, int want_tokens, std::optional<float> want_state) {
    const PrefixHit hit = cm.find_prefix(t);
    EXPECT_EQ(hit.n_tokens(64), want_tokens);
    SequenceCache c;
    EXPECT_TRUE(cm.admit(&c, hit, int(t.size())).ok());
    if (want_state) {
      EXPECT_EQ(s.state(c.slot), *want_state);
    }
    for (int b = 0; b < want_tokens / 64; ++b) EXPECT_EQ(c.blocks[size_t(b)], ca.blocks[size_t(b)]);
    return c;
  };
  std::vector<int32_t> b(a.begin(), a.begin() + 140), d(a.begin(), a.begin() + 128),
      e(a.begin(), a.begin() + 129);
  b.push_back(7);
  auto cb = resumed_at(b, 128, 128);
  auto cd = resumed_at(d, 64, 64);  // the whole prompt cached: the last token is computed
  auto ce = resumed_at(e, 128, 128);
  std::vector<int32_t> f = a;
  f[100] = (f[100] + 1) % 512;  // differs in the second block
  auto cf = resumed_at(f, 64, 64);
  f[0] = (f[0] + 1) % 512;
  auto cg = resumed_at(f, 0, std::nullopt);  // no hit: starts from position 0
  for (SequenceCache* c : {&ca, &cb, &cd, &ce, &cf, &cg}) ASSERT_TRUE(cm.release(c).ok());
  EXPECT_EQ(cm.blocks_in_use(), 0);
  EXPECT_EQ(cm.index().n_idle(), 2);
  ASSERT_TRUE(cm.evict_all().ok());
  EXPECT_EQ(cm.blocks().used_count(), 0);
  EXPECT_EQ(cm.snapshots().used_count(), 0);
  EXPECT_EQ(cm.slots().used_count(), 0);
}

struct Sim {
  SequenceCache c;
  std::vector<int32_t> tokens;
  int n_prompt = 0, n_computed = 0, n_decode = 0;
};

// Random admissions, chunked steps, decode, finishes and preemptions over a few shared prefixes, with a block
// pool and a snapshot pool far too small for all of it.
// With a host tier (host_blocks > 0), evicted blocks and snapshots move there and hits bring them back.
// With a disk tier below (`disk`), what leaves the host tier goes to files and a hit reaching them reads them
// back first; one read in ten fails (as a corrupt file would) and cuts the hit there.
void random_load(PrefixIndex::HashFn hash, bool expect_evictions, int host_blocks = 0, int host_snapshots = 0,
                 bool disk = false) {
  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed) + ", host tier " + std::to_string(host_blocks) + " blocks, " +
               std::to_string(host_snapshots) + " snapshots" + (disk ? ", a disk tier" : ""));
  std::mt19937 rng(seed);
  Caches s(4, 24, 5, 128, hash, host_blocks, host_snapshots, disk);
  CacheManager& cm = *s.cm;
  std::vector<std::vector<int32_t>> bases;
  for (int i = 0; i < 3; ++i) bases.push_back(random_tokens(rng, 300));
  std::vector<std::unique_ptr<Sim>> running;
  int hits = 0, evictions_seen = 0;

  // Writes the step's positions and the state after it, as the model would; only ever into the sequence's
  // own blocks.
  auto step = [&](Sim& q, int n) {
    for (int p = q.n_computed; p < q.n_computed + n; ++p) {
      ASSERT_GE(p / 64, int(q.c.shared.size())) << "writing a shared block";
      s.set_kv(q.c, p, prefix_value(std::span(q.tokens).first(size_t(p) + 1)));
    }
    q.n_computed += n;
    s.set_state(q.c.slot, prefix_value(std::span(q.tokens).first(size_t(q.n_computed))));
    ASSERT_TRUE(cm.commit(&q.c, q.tokens, q.n_prompt, q.n_computed).ok());
  };
  auto check_disjoint = [&] {
    std::set<int32_t> own, shared;
    for (const auto& q : running) {
      for (size_t b = 0; b < q->c.blocks.size(); ++b)
        if (b < q->c.shared.size()) {
          EXPECT_EQ(cm.index().entry(q->c.shared[b]).block,
                    q->c.blocks[b]);  // held entries are never evicted
          shared.insert(q->c.blocks[b]);
        } else {
          EXPECT_TRUE(own.insert(q->c.blocks[b]).second) << "block " << q->c.blocks[b] << " owned twice";
        }
    }
    for (int32_t b : own) EXPECT_FALSE(shared.count(b)) << "own block " << b << " is shared";
    EXPECT_EQ(cm.blocks().used_count(), int(own.size() + shared.size()) + cm.index().n_idle());
  };

  // Admits `tokens` and runs its first step, checking that a prefix hit restores exactly the matched tokens'
  // state and latent KV. Returns the position it resumed at, or -1 when the pools cannot take it now.
  auto admit = [&](std::vector<int32_t> tokens, int n_decode) -> int {
    auto q = std::make_unique<Sim>();
    q->tokens = std::move(tokens);
    q->n_prompt = int(q->tokens.size());
    q->n_decode = n_decode;
    if (disk) s.stage_from_disk(q->tokens, rng() % 10 == 0);
    const PrefixHit hit = cm.find_prefix(q->tokens);
    const int start = hit.n_tokens(64);
    EXPECT_LT(start, q->n_prompt);
    const int n =
        std::min<int>(1 + int(rng() % 100), cm.next_snapshot_at(start, q->n_prompt, q->n_prompt) - start);
    if (!cm.can_admit(hit, start + n)) return -1;
    EXPECT_TRUE(cm.admit(&q->c, hit, start + n).ok());
    q->n_computed = start;
    if (start > 0) {
      ++hits;
      EXPECT_EQ(s.state(q->c.slot), prefix_value(std::span(q->tokens).first(size_t(start))));
      for (int p = 0; p < start; ++p)
        EXPECT_EQ(s.kv(q->c, p), prefix_value(std::span(q->tokens).first(size_t(p) + 1))) << "position " << p;
    }
    step(*q, n);
    running.push_back(std::move(q));
    return start;
  };
  // Steps a sequence's prompt to its end in random chunks that stop at every snapshot position.
  auto prefill = [&](Sim& q) {
    while (q.n_computed < q.n_prompt && !::testing::Test::HasFailure()) {
      const int n = std::min<int>(1 + int(rng() % 100),
                                  cm.next_snapshot_at(q.n_computed, q.n_prompt, q.n_prompt) - q.n_computed);
      ASSERT_TRUE(cm.grow(&q.c, q.n_computed + n).ok());
      step(q, n);
    }
  };

  // The opening is fixed so that every run resumes at least once, whatever the hash: one whole base prompt
  // into the empty cache, finished, then the same base's first 200 tokens and a new tail resume at 128 (its
  // deepest snapshot). Under the weak hash the random load alone can go without hits: whichever prompt first
  // fills a colliding hash keeps it, and that is often one with only a few tokens of a base.
  ASSERT_EQ(admit(bases[0], 0), 0);
  prefill(*running.back());
  ASSERT_TRUE(cm.release(&running.back()->c).ok());
  running.pop_back();
  {
    std::vector<int32_t> t(bases[0].begin(), bases[0].begin() + 200);
    const auto tail = random_tokens(rng, 20);
    t.insert(t.end(), tail.begin(), tail.end());
    ASSERT_EQ(admit(t, 10), 128);
  }

  for (int it = 0; it < 3000 && !::testing::Test::HasFailure(); ++it) {
    const int op = int(rng() % 10);
    if (op < 3 && running.size() < 4) {  // admit
      const auto& base = bases[rng() % bases.size()];
      std::vector<int32_t> t(base.begin(), base.begin() + long(rng() % base.size()));
      const auto tail = random_tokens(rng, 1 + rng() % 80);
      t.insert(t.end(), tail.begin(), tail.end());
      admit(std::move(t), int(rng() % 70));
    } else if (op < 9 && !running.empty()) {  // a step of one sequence: prefill chunk or decode
      Sim& q = *running[rng() % running.size()];
      const int len = int(q.tokens.size());
      if (q.n_computed == len) {
        if (q.n_decode-- <= 0) continue;
        q.tokens.push_back(int32_t(rng() % 512));  // a sampled token
        continue;
      }
      const int n = std::min<int>(1 + int(rng() % 100),
                                  cm.next_snapshot_at(q.n_computed, q.n_prompt, len) - q.n_computed);
      const int before = cm.index().n_entries();
      const uint64_t evicted_before = cm.evicted_blocks();
      if (cm.blocks_to_grow(q.c, q.n_computed + n) > cm.available_blocks()) {  // preempt it
        ASSERT_TRUE(cm.release(&q.c).ok());
        running.erase(std::find_if(running.begin(), running.end(), [&](auto& p) { return p.get() == &q; }));
        continue;
      }
      ASSERT_TRUE(cm.grow(&q.c, q.n_computed + n).ok());
      // (With a disk tier entries stay in the index, on disk: count device evictions instead.)
      evictions_seen += disk ? cm.evicted_blocks() > evicted_before : cm.index().n_entries() < before;
      step(q, n);
    } else if (!running.empty()) {  // finish one
      const size_t i = rng() % running.size();
      ASSERT_TRUE(cm.release(&running[i]->c).ok());
      running.erase(running.begin() + long(i));
    }
    check_disjoint();
    EXPECT_LE(cm.snapshots().used_count(), cm.snapshots().capacity());
    if (host_blocks > 0) {  // every host entry is reachable and useful: its chain is cached, a snapshot ends it
      for (PrefixIndex::EntryId id : cm.index().idle_chain_ends()) {
        const PrefixIndex::Entry& e = cm.index().entry(id);
        if (e.block < 0) {
          EXPECT_TRUE(e.host_snapshot >= 0 || e.disk_snapshot) << "a host-only chain end without a snapshot";
        }
      }
    }
  }
  EXPECT_GT(hits, 0);
  if (expect_evictions) {
    EXPECT_GT(evictions_seen, 0);
  }
  for (auto& q : running) ASSERT_TRUE(cm.release(&q->c).ok());
  EXPECT_EQ(cm.blocks_in_use(), 0);
  EXPECT_EQ(cm.slots().used_count(), 0);
  if (host_blocks > 0) {
    const auto& t = cm.tier_counters();
    std::printf("host tier: %llu blocks and %llu snapshots to the host, %llu and %llu back, %llu and %llu evicted\n",
                (unsigned long long)t.blocks_to_host, (unsigned long long)t.snapshots_to_host,
                (unsigned long long)t.blocks_to_device, (unsigned long long)t.snapshots_to_device,
                (unsigned long long)t.evicted_host_blocks, (unsigned long long)t.evicted_host_snapshots);
    // The device's 5 snapshots overflow all the time — unless the weak hash keeps chains short (a few commit
    // seeds in a hundred see none at all).
    if (expect_evictions) {
      EXPECT_GT(t.snapshots_to_host, 0u);
    }
    if (host_snapshots <= 2) {
      EXPECT_GT(t.evicted_host_snapshots, 0u);
    }
    if (disk) {
      std::printf("disk tier: %llu blocks and %llu snapshots to disk, %llu and %llu back, %llu reads failed\n",
                  (unsigned long long)t.blocks_to_disk, (unsigned long long)t.snapshots_to_disk,
                  (unsigned long long)t.blocks_from_disk, (unsigned long long)t.snapshots_from_disk,
                  (unsigned long long)t.disk_load_failures);
      if (expect_evictions) {  // (under the weak hash few chains grow long enough to push much that far)
        EXPECT_GT(t.snapshots_from_disk, 0u);
        EXPECT_GT(t.blocks_to_disk, 0u);
        EXPECT_GT(t.blocks_from_disk, 0u);
      }
    }
  }
  ASSERT_TRUE(cm.evict_all().ok());
  EXPECT_EQ(cm.index().n_entries(), 0);
  EXPECT_EQ(cm.blocks().used_count(), 0);
  EXPECT_EQ(cm.snapshots().used_count(), 0);
  EXPECT_EQ(cm.host_blocks().used_count(), 0);
  EXPECT_EQ(cm.host_snapshots().used_count(), 0);
}

TEST(CacheManager, RandomLoadUnderPressureIsExactAndLeavesNothingBehind) {
  random_load(nullptr, true);
}

// A host tier larger than the device pool (hits come back from it), and one so small that it evicts too
// (its policy: chain ends first, snapshots only with every block before them).
TEST(CacheManager, RandomLoadWithAHostTierIsExact) {
  random_load(nullptr, true, 64, 12);
}
TEST(CacheManager, RandomLoadWithAFullHostTierIsExact) {
  random_load(nullptr, true, 6, 2);
}
// A small host tier over a disk tier: hits come back from every tier, and reads that fail only shorten them.
TEST(CacheManager, RandomLoadWithADiskTierIsExact) {
  random_load(nullptr, true, 8, 2, true);
}

// A conversation evicted from the device entirely comes back from the host tier: its blocks into fresh device
// blocks and its snapshot into the new sequence's slot, exactly the state and latent KV of the matched tokens.
TEST(CacheManager, APrefixEvictedToTheHostTierComesBackExactly) {
  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  Caches s(2, 4, 1, 64, nullptr, 8, 4);
  CacheManager& cm = *s.cm;
  ASSERT_TRUE(cm.host_tier());
  auto run = [&](const std::vector<int32_t>& t) {  // the whole prompt in steps of 64, then released
    SequenceCache c;
    const PrefixHit hit = cm.find_prefix(t);
    int n = hit.n_tokens(64);
    EXPECT_TRUE(cm.admit(&c, hit, std::min<int>(n + 64, int(t.size()))).ok());
    while (n < int(t.size())) {
      const int m = std::min<int>(64, int(t.size()) - n);
      EXPECT_TRUE(cm.grow(&c, n + m).ok());
      for (int p = n; p < n + m; ++p) s.set_kv(c, p, prefix_value(std::span(t).first(size_t(p) + 1)));
      n += m;
      s.set_state(c.slot, prefix_value(std::span(t).first(size_t(n))));
      EXPECT_TRUE(cm.commit(&c, t, int(t.size()), n).ok());
    }
    EXPECT_TRUE(cm.release(&c).ok());
  };
  const auto a = random_tokens(rng, 150), b = random_tokens(rng, 250);
  run(a);  // snapshots at 64 and 128; the one snapshot slot sends the first to the host
  EXPECT_EQ(cm.tier_counters().snapshots_to_host, 1u);
  // b needs all 4 device blocks: a's two go to the host (its snapshots are there already, pushed out of the
  // device by b's at 64, 128 and 192, which fill the host's four).
  run(b);
  EXPECT_EQ(cm.tier_counters().blocks_to_host, 2u);
  std::vector<int32_t> a2(a.begin(), a.begin() + 140);
  a2.push_back(7);
  const PrefixHit hit = cm.find_prefix(a2);
  ASSERT_EQ(hit.n_tokens(64), 128);
  EXPECT_EQ(hit.n_host, 2);
  EXPECT_EQ(hit.snapshot, -1);
  EXPECT_GE(hit.host_snapshot, 0);
  SequenceCache c;
  ASSERT_TRUE(cm.admit(&c, hit, int(a2.size())).ok());
  EXPECT_EQ(s.state(c.slot), prefix_value(std::span(a2).first(128)));
  for (int p = 0; p < 128; ++p) EXPECT_EQ(s.kv(c, p), prefix_value(std::span(a2).first(size_t(p) + 1))) << p;
  EXPECT_EQ(cm.tier_counters().blocks_to_device, 2u);
  EXPECT_EQ(cm.tier_counters().snapshots_to_device, 1u);
  EXPECT_EQ(cm.tier_bytes_to_device(), 2 * s.host.block_bytes + s.host.snapshot_bytes);
  ASSERT_TRUE(cm.release(&c).ok());
  ASSERT_TRUE(cm.evict_all().ok());
  EXPECT_EQ(cm.index().n_entries(), 0);
  EXPECT_EQ(cm.host_blocks().used_count() + cm.host_snapshots().used_count() + cm.blocks().used_count(), 0);
}

// Only the first token of each block and the parent's hash: blocks at one depth collide all the time (so few
// chains get far enough to be evicted under pressure). The +1 keeps the depths apart, so the opening's chain
// never collides with itself; collisions across depths are PrefixIndex's own test.
uint64_t weak_hash(uint64_t parent_hash, std::span<const int32_t> tokens) {
  return parent_hash * 31 + 1 + uint64_t(tokens[0] % 4);
}

TEST(CacheManager, CollidingHashesStillResumeOnlyExactPrefixes) {
  random_load(&weak_hash, false);
}
TEST(CacheManager, CollidingHashesWithAHostTierStillResumeOnlyExactPrefixes) {
  random_load(&weak_hash, false, 16, 4);
}
TEST(CacheManager, CollidingHashesWithADiskTierStillResumeOnlyExactPrefixes) {
  random_load(&weak_hash, false, 16, 4, true);
}

// A release the pools refuse (a double release: here the slot was already given back through a stale copy of
// the sequence's cache) is reported, and still gives back the rest and empties the sequence, so nothing is
// left that a second release could free twice (another sequence may hold those ids by then).
TEST(CacheManager, AFailedReleaseIsReportedAndLeavesNothingToReleaseTwice) {
  auto be = backend::make_cpu_backend();
  const auto cfg = *model::ModelConfig::load(testing::data_dir() / "kimi_linear_tiny_a");
  MemoryPlan plan;
  plan.n_slots = 2;
  plan.n_blocks = 8;
  auto cm = *CacheManager::create(plan);
  SequenceCache a;
  ASSERT_TRUE(cm.admit(&a, 100).ok());  // a slot and two 64-token blocks
  SequenceCache stale;
  stale.slot = a.slot;
  ASSERT_TRUE(cm.release(&stale).ok());
  const Status st = cm.release(&a);
  EXPECT_EQ(st.code(), StatusCode::Internal);
  EXPECT_NE(st.message().find("KDA state slots"), std::string::npos) << st.message();
  EXPECT_EQ(a.slot, -1);
  EXPECT_TRUE(a.blocks.empty());
  EXPECT_EQ(cm.blocks().used_count(), 0);  // its blocks went back all the same
  EXPECT_EQ(cm.slots().used_count(), 0);
  SequenceCache b;
  ASSERT_TRUE(cm.admit(&b, 100).ok());  // reuses a's ids
  EXPECT_TRUE(cm.release(&a).ok());     // nothing of b's is freed through a
  EXPECT_EQ(cm.blocks().used_count(), 2);
  EXPECT_EQ(cm.slots().used_count(), 1);
  EXPECT_TRUE(cm.release(&b).ok());
}

// A hit naming a snapshot outside the pool (a bug) fails admit() and gives back the slot and blocks it took;
// the next admission gets them, and no copy is queued.
TEST(CacheManager, AFailedSnapshotRestoreGivesBackTheSlotAndBlocks) {
  auto be = backend::make_cpu_backend();
  const auto cfg = *model::ModelConfig::load(testing::data_dir() / "kimi_linear_tiny_a");
  MemoryPlan plan;
  plan.n_slots = 1;
  plan.n_blocks = 2;
  auto cm = *CacheManager::create(plan);
  PrefixHit bad;
  bad.snapshot = 1000;
  SequenceCache a;
  const Status st = cm.admit(&a, bad, 100);
  EXPECT_EQ(st.code(), StatusCode::Internal) << st.to_string();
  EXPECT_EQ(a.slot, -1);
  EXPECT_EQ(cm.slots().used_count(), 0);
  EXPECT_EQ(cm.blocks().used_count(), 0);
  SequenceCache b;
  EXPECT_TRUE(cm.take_ops().empty());
  EXPECT_TRUE(cm.admit(&b, 100).ok());  // the only slot and both blocks are free again
  EXPECT_TRUE(cm.release(&b).ok());
}

// Speculative decoding's verbs: save_checkpoint copies the slot to its own checkpoint slot (past every other
// kind, one per sequence slot) unless it holds that position already; roll_back copies it back and gives back
// the blocks past the committed tokens; the checkpoint is forgotten when the slot is released. Applied to
// real storage through the runner's apply_cache_ops.
TEST(CacheManager, SpeculationCheckpointsRestoreTheSlotAndTruncateBlocks) {
  auto be = backend::make_cpu_backend();
  const auto cfg = *model::ModelConfig::load(testing::data_dir() / "kimi_linear_tiny_a");
  MemoryPlan plan;
  plan.n_slots = 2;
  plan.n_blocks = 8;
  plan.n_checkpoints = 2;
  auto cm = *CacheManager::create(plan);
  ASSERT_TRUE(cm.has_checkpoints());
  EXPECT_EQ(CacheManager::state_slots_needed(plan, {}), 4);
  auto storage = *model::ModelCaches::allocate(*be, cfg, 4, 8);
  auto fill = [&](int slot, float v) {
    for (const auto& L : storage.layers)
      for (const TensorView* t : {&L.kda_state, &L.kda_conv})
        if (!t->empty())
          std::fill_n(t->ptr<float>() + slot * (t->numel() / t->size(0)), t->numel() / t->size(0), v);
  };
  auto value = [&](int slot) {
    const TensorView& t = storage.layers[0].kda_state;  // layer 0 is KDA in the tiny config
    return t.ptr<float>()[slot * (t.numel() / t.size(0))];
  };
  auto apply = [&] { ASSERT_TRUE(runner::apply_cache_ops(*be, storage, cm.take_ops()).ok()); };
  ASSERT_EQ(cfg.layer_kinds[0], model::LayerKind::Kda);
  SequenceCache a, b;
  ASSERT_TRUE(cm.admit(&a, 10).ok());
  ASSERT_TRUE(cm.admit(&b, 10).ok());
  EXPECT_EQ(cm.checkpoint_slot(a.slot), 2 + a.slot);
  fill(a.slot, 1.0f);
  fill(b.slot, 7.0f);
  ASSERT_TRUE(cm.save_checkpoint(&a, 60).ok());
  EXPECT_EQ(cm.take_ops().kda_slot_copies.size(), 1u);
  ASSERT_TRUE(cm.save_checkpoint(&a, 60).ok());
  EXPECT_TRUE(cm.take_ops().empty());  // the checkpoint holds position 60 already: no second copy
  ASSERT_TRUE(cm.save_checkpoint(&a, 61).ok());
  apply();
  EXPECT_EQ(value(cm.checkpoint_slot(a.slot)), 1.0f);
  fill(a.slot, 2.0f);  // the verify step moves the slot past its drafts
  ASSERT_TRUE(cm.grow(&a, 190).ok());
  EXPECT_EQ(a.blocks.size(), 3u);
  EXPECT_EQ(cm.blocks().used_count(), 4);
  ASSERT_TRUE(cm.roll_back(&a, 120).ok());  // 120 committed tokens: two blocks
  apply();
  EXPECT_EQ(value(a.slot), 1.0f);
  EXPECT_EQ(value(b.slot), 7.0f);  // another sequence's slot is untouched
  EXPECT_EQ(a.blocks.size(), 2u);
  EXPECT_EQ(cm.blocks().used_count(), 3);
  EXPECT_EQ(a.checkpoint_pos, 61);
  ASSERT_TRUE(cm.release(&a).ok());
  EXPECT_EQ(a.checkpoint_pos, -1);
  SequenceCache c;  // takes a's slot: its checkpoint is not a's
  ASSERT_TRUE(cm.admit(&c, 10).ok());
  EXPECT_EQ(c.checkpoint_pos, -1);
  EXPECT_FALSE(cm.roll_back(&c, 10).ok());  // nothing to go back to: a bug, not a silent copy
  ASSERT_TRUE(cm.release(&b).ok());
  ASSERT_TRUE(cm.release(&c).ok());
  EXPECT_EQ(cm.blocks().used_count(), 0);
  plan.n_checkpoints = 1;  // one per slot or none
  EXPECT_FALSE(CacheManager::create(plan).ok());
}

}  // namespace
}  // namespace rill::cache
