// The prefix-cache tests' harness (prefix_cache_test.cc, disk_tier_test.cc): an engine on the CPU backend
// whose requests run greedily and log every sampled position's logits, the reference computation without
// caching, and the comparison of the two. Each test program's file gets its own copy (an unnamed namespace).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "engine/engine_fixtures.h"
#include "engine/logged_engine.h"
#include "model/fixture.h"
#include "model/model.h"
#include "test_seed.h"

namespace rill::engine {
namespace {

using rill::testing::random_tokens;

// Caching on changes where prefill chunks end (at snapshot positions) and lets a request read KV that another
// request computed in other chunks, so on the fp32 CPU backend logits agree up to rounding, not bit for bit.
// Measured on the tiny fixtures over many seeds: at most 2.2e-6 of the row's largest |logit|, max |diff|
// over the row; 1e-5 leaves margin without hiding a wrong state (a stale or shifted state moves logits by
// orders of magnitude more).
constexpr double kRelTol = 1e-5;
// The tiny K3 (7 layers, AttnRes, latent MoE) amplifies the same fp32 rounding differences more: measured
// 2026-12-01 over 8 runs of every case, at most 2.3e-5 (the 50-token multi-turn continuations); 2e-4 keeps
// the margin, still orders of magnitude below what a wrong state does.
constexpr double kRelTolK3 = 2e-4;

struct Outcome {
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> logits;  // one row per sampled position
  int cached = -1;
  FinishReason reason = FinishReason::Error;
};

struct LogitsLog {
  std::mutex mu;
  std::map<uint64_t, std::vector<std::vector<float>>> rows;
};

// The K3 fixture with every token routed to all 8 of its experts (engine_fixtures.h). One CI run failed on
// an expert choice that flipped within rounding (request 1 of
// ConcurrentRequestsSharingAPrefixThenEverythingEvicts: 1e-3 at its first position, 4% later; not reproduced
// in 100+ local runs, and caching off under other chunkings stays within 2e-5).
inline std::filesystem::path model_dir(const std::string& fixture) { return testing::engine_model_dir(fixture); }

class Harness {
 public:
  Harness(const std::string& fixture, EngineOptions o) : log_(std::make_shared<LogitsLog>()) {
    be_ = backend::make_cpu_backend();
    auto m = model::load_model(model_dir(fixture), *be_);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    std::shared_ptr<LogitsLog> log = log_;
    o.logits_hook = [log](uint64_t id, int32_t, std::span<const float> row) {
      std::lock_guard lock(log->mu);
      log->rows[id].emplace_back(row.begin(), row.end());
    };
    auto e = Engine::create(std::move(m).value(), nullptr, o);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    engine_ = std::move(e).value();
  }
  ~Harness() { engine_->shutdown(false); }

  std::shared_ptr<RequestStream> submit(const std::vector<int32_t>& prompt, int max_tokens) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    auto s = engine_->submit({prompt, p});
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return *s;
  }
  Outcome collect(const std::shared_ptr<RequestStream>& s) {
    Outcome r;
    StreamEvent ev;
    while (s->next(&ev, std::chrono::seconds(120))) {
      r.ids.insert(r.ids.end(), ev.token_ids.begin(), ev.token_ids.end());
      if (ev.finish) {
        r.reason = *ev.finish;
        r.cached = ev.cached_tokens;
        std::lock_guard lock(log_->mu);
        r.logits = std::move(log_->rows[s->id()]);
        return r;
      }
    }
    ADD_FAILURE() << "request timed out";
    return r;
  }
  Outcome run(const std::vector<int32_t>& prompt, int max_tokens) {
    return collect(submit(prompt, max_tokens));
  }
  Engine& engine() { return *engine_; }

 private:
  std::unique_ptr<backend::Backend> be_;  // outlives the engine (declared first)
  std::shared_ptr<LogitsLog> log_;
  std::unique_ptr<Engine> engine_;
};

// Every test runs on a Kimi Linear and a Kimi K3 checkpoint (the issue asks for both); set by the suite.
std::string current_fixture = "kimi_linear_tiny_b";

inline double rel_tol() { return current_fixture.rfind("kimi_k3", 0) == 0 ? kRelTolK3 : kRelTol; }

class PrefixCache : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { current_fixture = GetParam(); }
};

inline EngineOptions caching(int max_num_tokens, int interval, int max_batch_size = 4) {
  EngineOptions o{.max_batch_size = max_batch_size, .max_num_tokens = max_num_tokens};
  o.enable_prefix_caching = true;
  o.kda_snapshot_interval = interval;
  return o;
}

// Off: one request at a time, whole prompts in one step (no chunking), no cache: the plainest computation.
inline Outcome reference(const std::vector<int32_t>& prompt, int max_tokens) {
  const std::string& fixture = current_fixture;
  static std::map<std::string, std::unique_ptr<Harness>> off;
  auto& h = off[fixture];
  if (!h) h = std::make_unique<Harness>(fixture, EngineOptions{.max_batch_size = 1, .max_num_tokens = 1024});
  return h->run(prompt, max_tokens);
}

inline void expect_same(const Outcome& on, const Outcome& off, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(on.reason, FinishReason::Length);
  EXPECT_EQ(on.ids, off.ids);
  ASSERT_EQ(on.logits.size(), off.logits.size());
  for (size_t r = 0; r < on.logits.size(); ++r) {
    ASSERT_EQ(on.logits[r].size(), off.logits[r].size());
    double diff = 0, scale = 0;
    for (size_t i = 0; i < on.logits[r].size(); ++i) {
      diff = std::max(diff, std::abs(double(on.logits[r][i]) - off.logits[r][i]));
      scale = std::max(scale, std::abs(double(off.logits[r][i])));
    }
    EXPECT_LE(diff, rel_tol() * scale) << "sampled position " << r;
  }
}

using rill::testing::test_seed;  // $RILL_TEST_SEED replays a run (each test's trace prints its seed)

inline std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Three conversations of three turns interleaved (130 to 150 tokens, then each turn adds its 6-token reply and
// 30 new tokens), so that each one's blocks and snapshots are pushed off the device (and further) by the
// others before it returns; every output is checked against the computation without caching. Returns how
// many of the 6 returning turns found something cached.
inline int interleaved_conversations(Harness& on, std::mt19937& rng) {
  std::vector<std::vector<int32_t>> conversations;
  for (int c = 0; c < 3; ++c) conversations.push_back(random_tokens(rng, 130 + 10 * size_t(c)));
  int returning_hits = 0;
  for (int turn = 0; turn < 3; ++turn)
    for (size_t c = 0; c < conversations.size(); ++c) {
      auto& conv = conversations[c];
      const Outcome r = on.run(conv, 6);
      expect_same(r, reference(conv, 6), "conversation " + std::to_string(c) + ", turn " + std::to_string(turn));
      if (turn > 0) returning_hits += r.cached > 0;
      conv = concat(concat(conv, r.ids), random_tokens(rng, 30));
    }
  return returning_hits;
}

}  // namespace
}  // namespace rill::engine
