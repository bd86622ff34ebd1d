// CPU reference vs an independent PyTorch implementation of Kimi K3 (fp32): the logits of every prompt
// position (max |dlogit| <= 1e-3) and greedy continuations through the cache (identical tokens; and, when the
// fixture records them, the logits of each teacher-forced decode step). Fixtures: tests/data/kimi_k3_*/
// (config.json, model.safetensors or shards + index, reference.safetensors with prompt_N / logits_N /
// greedy_N
// [/ decode_logits_N]), made by tools/reference/make_kimi_k3_fixtures.py on the GPU machine. Runs over
// whichever fixtures exist and skips with a message while there are none.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "model/fixture.h"
#include "model/sequence_session.h"

namespace rill {
namespace {

using testing::max_abs_diff;

// A K3 fixture through the shared loader (a workspace for steps of up to 256 tokens, 8 sequences).
std::unique_ptr<model::Model> load(backend::Backend& be, const std::filesystem::path& dir) {
  auto m = testing::load_fixture_model(dir, be);
  if (m) {
    EXPECT_EQ(m->config().family, model::ModelFamily::KimiK3) << dir;
  }
  return m;
}

TEST(KimiK3Parity, PromptLogitsAndGreedyContinuationsMatchTheReference) {
  const std::vector<std::string> fixtures = testing::kimi_k3_fixtures();
  if (fixtures.empty())
    GTEST_SKIP() << "no kimi_k3_* fixtures in tests/data yet (tools/reference/make_kimi_k3_fixtures.py)";
  for (const std::string& name : fixtures) {
    SCOPED_TRACE(name);
    const auto dir = testing::data_dir() / name;
    auto be = backend::make_cpu_backend();
    auto m = load(*be, dir);
    ASSERT_TRUE(m);
    testing::Reference ref(dir);
    ASSERT_GE(ref.n_prompts(), 1);
    const int64_t V = m->config().vocab_size;
    for (int p = 0; p < ref.n_prompts(); ++p) {
      const std::string n = std::to_string(p);
      const auto ids = ref.ints("prompt_" + n);
      auto s = model::SequenceSession::create(*m, 512);
      ASSERT_TRUE(s.ok());
      auto logits = s->feed(ids, 0, true);
      ASSERT_TRUE(logits.ok()) << logits.status().to_string();
      const float d = max_abs_diff(*logits, ref.floats("logits_" + n));
      std::printf("%s prompt %d (%zu tokens): max |dlogit| = %.3g\n", name.c_str(), p, ids.size(), d);
      EXPECT_LE(d, 1e-3f) << name << " prompt " << p;
      if (!ref.has("greedy_" + n)) continue;
      const auto want = ref.ints("greedy_" + n);
      const bool decode_logits = ref.has("decode_logits_" + n);
      const std::vector<float> want_logits =
          decode_logits ? ref.floats("decode_logits_" + n) : std::vector<float>{};
      std::vector<int32_t> got;
      for (size_t i = 0; i < want.size(); ++i) {
        auto next = s->sample(backend::SamplingRow{});  // temperature 0: greedy
        ASSERT_TRUE(next.ok());
        got.push_back(*next);
        const int32_t id = want[i];  // teacher-force the reference token so one slip does not cascade
        auto step = s->feed(std::span<const int32_t>(&id, 1), 1, false);
        ASSERT_TRUE(step.ok()) << step.status().to_string();
        if (decode_logits) {
          std::vector<float> row(want_logits.begin() + int64_t(i) * V,
                                 want_logits.begin() + int64_t(i + 1) * V);
          EXPECT_LE(max_abs_diff(*step, row), 1e-3f) << name << " prompt " << p << " decode step " << i;
        }
      }
      EXPECT_EQ(got, want) << name << " prompt " << p;
    }
  }
}

// The per-layer hidden states (when the fixture records them): [0] = embedding, [i + 1] = layer i's output, the
// partial sum P, except that the last entry is the final-normed hidden as in transformers' hidden_states
// (tools/reference/kimi_k3_reference.py note A6; the logits test covers it). Names the first diverging layer.
TEST(KimiK3Parity, LayerOutputsMatchTheReference) {
  const std::vector<std::string> fixtures = testing::kimi_k3_fixtures();
  if (fixtures.empty()) GTEST_SKIP() << "no kimi_k3_* fixtures in tests/data yet";
  for (const std::string& name : fixtures) {
    SCOPED_TRACE(name);
    const auto dir = testing::data_dir() / name;
    testing::Reference ref(dir);
    if (!ref.has("hidden_taps")) continue;
    auto be = backend::make_cpu_backend();
    auto m = load(*be, dir);
    ASSERT_TRUE(m);
    const auto ids = ref.ints("prompt_" + std::to_string(ref.ints("hidden_taps_prompt")[0]));
    const auto want = ref.floats("hidden_taps");
    const int64_t per = int64_t(ids.size()) * m->config().hidden_size;
    ASSERT_GE(int64_t(want.size()), per * (m->config().n_layers + 1));
    model::TapRecorder taps;
    m->set_tap_recorder(&taps);
    auto s = model::SequenceSession::create(*m, 512);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->feed(ids, 0, false).ok());
    m->set_tap_recorder(nullptr);
    std::map<std::string, const std::vector<float>*> got;
    for (const auto& t : taps.taps()) got[t.name] = &t.values;
    for (int i = -1; i + 1 < m->config().n_layers; ++i) {
      const std::string tap = i < 0 ? "embed" : "L" + std::to_string(i) + ".partial";
      ASSERT_TRUE(got.count(tap)) << tap;
      const std::vector<float> ref_layer(want.begin() + (i + 1) * per, want.begin() + (i + 2) * per);
      float mag = 0;
      for (float v : ref_layer) mag = std::max(mag, std::fabs(v));
      ASSERT_LE(max_abs_diff(*got[tap], ref_layer), 1e-4f * (1 + mag)) << name << " " << tap;
    }
  }
}

}  // namespace
}  // namespace rill
