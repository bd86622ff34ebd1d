// Cross-backend tests of sampling (src/backend/cuda/sample.cu) against the CPU rule (backend/sampling.cc):
// the same F32 logits and SamplingRows on both backends must give the same token for every row: greedy
// (ties to the lowest id), and seeded temperature / top-k / top-p / min-p sampling, at the test model's
// vocabulary (512) and Kimi's (163840), with more rows than one CUDA chunk, peaked, flat and heavily tied
// logits; grammar masks (mask_logits) before sampling; non-finite rows (nonfinite_rows). The CUDA rule sums
// fp64 probabilities in another order than the CPU; a decision could differ only when top_p, min_p or u falls
// within ~1e-15 of a cumulative sum, which these inputs never hit.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/op_harness.h"
#include "backend/workspace_planner.h"

namespace rill::testing {
namespace {

enum class Shape { Normal, Peaked, Tied };

std::vector<float> make_logits(OpHarness& h, int64_t R, int64_t V, Shape shape) {
  std::vector<float> l = h.randn(R * V, shape == Shape::Peaked ? 3.0f : 1.0f, false);
  for (int64_t r = 0; r < R; ++r) {
    float* row = l.data() + r * V;
    if (shape == Shape::Tied)  // a few distinct values: long runs of exact ties, also at the maximum
      for (int64_t i = 0; i < V; ++i) row[i] = std::round(row[i] * 2.0f) / 2.0f;
    if (shape == Shape::Peaked) {  // LM-like: a handful of dominant tokens over a low tail
      std::uniform_int_distribution<int64_t> d(0, V - 1);
      for (int k = 0; k < 5; ++k) row[d(h.rng())] += 12.0f - 2.0f * float(k);
    }
  }
  return l;
}

// Runs sample on both backends for `rows` and returns (cpu ids, device ids).
std::pair<std::vector<float>, std::vector<float>> run(OpHarness& h, const std::vector<float>& logits,
                                                      int64_t V,
                                                      const std::vector<backend::SamplingRow>& rows,
                                                      bool all_greedy = false) {
  const int64_t R = int64_t(rows.size());
  auto [lc, ld] = h.put_both(logits, DType::F32, DType::F32, {R, V});
  BackendTensor oc = h.empty(h.cpu(), DType::I32, {R}), od = h.empty(h.dev(), DType::I32, {R});
  const size_t row_bytes = rows.size() * sizeof(backend::SamplingRow);
  auto dev_rows = h.dev().allocate(row_bytes);
  EXPECT_TRUE(dev_rows.ok());
  EXPECT_TRUE(h.dev().copy_to_device(dev_rows->data(), rows.data(), row_bytes).ok());
  EXPECT_TRUE(h.cpu().sample({lc.view, rows.data(), oc.view, nullptr}).ok());
  // Scratch sized by planning the op, as the model plans its workspace; filled with junk first.
  backend::SampleArgs a{ld.view, static_cast<const backend::SamplingRow*>(dev_rows->data()), od.view,
                        nullptr, all_greedy};
  Arena measure(nullptr, 0, Device::Cuda);
  a.scratch = &measure;
  EXPECT_TRUE(backend::WorkspacePlanner(h.dev()).sample(a).ok());
  auto scratch_mem = h.dev().allocate(measure.high_water() + 256);
  EXPECT_TRUE(scratch_mem.ok());
  EXPECT_TRUE(h.dev()
                  .fill_random(TensorView::make(scratch_mem->data(), DType::U8,
                                                {int64_t(scratch_mem->size())}, Device::Cuda),
                               5, 0, 255)
                  .ok());
  Arena scratch(scratch_mem->data(), scratch_mem->size(), Device::Cuda);
  a.scratch = &scratch;
  const Status st = h.dev().sample(a);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(scratch.used(), 0u) << "sample must give its scratch back";
  return {h.get(h.cpu(), oc.view), h.get(h.dev(), od.view)};
}

void expect_same(const std::vector<float>& cpu, const std::vector<float>& dev,
                 const std::vector<backend::SamplingRow>& rows) {
  ASSERT_EQ(cpu.size(), dev.size());
  for (size_t r = 0; r < cpu.size(); ++r) {
    const backend::SamplingRow& s = rows[r];
    EXPECT_EQ(int(dev[r]), int(cpu[r]))
        << "row " << r << ": T " << s.temperature << " top_k " << s.top_k << " top_p " << s.top_p << " min_p "
        << s.min_p << " seed " << s.seed << " counter " << s.counter;
  }
}

class SampleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SampleTest, GreedyTakesTheFirstMaximum) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  // all_greedy: the host says every row is greedy, so the GPU takes its split-argmax path (V >= 32) or the
  // prepare kernel alone (V < 32).
  for (bool all_greedy : {false, true})
  for (int64_t V : {16, 512, 163840})
    for (Shape shape : {Shape::Normal, Shape::Tied}) {
      SCOPED_TRACE(::testing::Message() << "V " << V << " shape " << int(shape) << " all_greedy " << all_greedy);
      const int64_t R = 37;
      std::vector<float> l = make_logits(h, R, V, shape);
      for (int64_t i = 0; i < V; i += 97) l[size_t(i)] = 50.0f;  // row 0: many equal maxima
      std::vector<backend::SamplingRow> rows(static_cast<size_t>(R));
      for (size_t r = 0; r < rows.size(); ++r) {
        if (r % 3 == 1) rows[r].temperature = -1.0f;
        if (r % 3 == 2) rows[r] = {0.9f, 0.5f, 0.1f, 1, 17, r};  // top_k = 1 is greedy too
      }
      auto [cpu, dev] = run(h, l, V, rows, all_greedy);
      expect_same(cpu, dev, rows);
    }
}

// Every combination of the controls, several seeds and counters, on both vocabularies and logit shapes.
TEST_P(SampleTest, SeededSamplingMatchesTheCpu) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  const float temps[] = {0.7f, 1.0f, 1.6f};
  const int top_ks[] = {0, 5, 50, 1000};
  const float top_ps[] = {1.0f, 0.9f, 0.3f};
  const float min_ps[] = {0.0f, 0.05f};
  for (int64_t V : {512, 163840})
    for (Shape shape : {Shape::Normal, Shape::Peaked, Shape::Tied}) {
      SCOPED_TRACE(::testing::Message() << "V " << V << " shape " << int(shape));
      std::vector<backend::SamplingRow> rows;
      for (float t : temps)
        for (int k : top_ks)
          for (float p : top_ps)
            for (float m : min_ps) {
              const uint64_t seed = uint64_t(h.seed()) + rows.size() * 7;
              rows.push_back({t, p, m, k, seed, uint64_t(rows.size() % 5)});
            }
      // 72 rows: three CUDA chunks, the last one partial. Each row gets its own logits.
      const std::vector<float> l = make_logits(h, int64_t(rows.size()), V, shape);
      auto [cpu, dev] = run(h, l, V, rows);
      expect_same(cpu, dev, rows);
    }
}

// Same logits, many counters: the draws cover the whole inverse CDF (u near 0 and near 1), which decides how
// much of the sorted order the CUDA path has to sort.
TEST_P(SampleTest, ManyDrawsFromOneDistribution) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (int64_t V : {512, 163840}) {
    SCOPED_TRACE(::testing::Message() << "V " << V);
    const int64_t R = 64;
    const std::vector<float> one = make_logits(h, 1, V, Shape::Peaked);
    std::vector<float> l;
    for (int64_t r = 0; r < R; ++r) l.insert(l.end(), one.begin(), one.end());
    std::vector<backend::SamplingRow> rows;
    for (int64_t r = 0; r < R; ++r)
      rows.push_back({1.0f, r % 2 ? 1.0f : 0.95f, 0.0f, 0, uint64_t(h.seed()), uint64_t(r)});
    auto [cpu, dev] = run(h, l, V, rows);
    expect_same(cpu, dev, rows);
  }
}

TEST_P(SampleTest, SingleRowAndExtremeControls) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  const int64_t V = 163840;
  const std::vector<backend::SamplingRow> cases = {
      {1.0f, 1.0f, 0.0f, 0, 1, 0},      {1e-3f, 1.0f, 0.0f, 0, 2, 0},  {100.0f, 1.0f, 0.0f, 0, 3, 0},
      {1.0f, 0.0f, 0.0f, 0, 4, 0},      {1.0f, 1.0f, 1.0f, 0, 5, 0},   {1.0f, 1.0f, 0.0f, 163840, 6, 0},
      {1.0f, 1.0f, 0.0f, 200000, 7, 0}, {1.0f, 0.999f, 0.0f, 2, 8, 0}, {0.5f, 0.5f, 0.5f, 3, 9, 0}};
  for (const backend::SamplingRow& row : cases) {
    const std::vector<backend::SamplingRow> rows = {row};
    auto [cpu, dev] = run(h, make_logits(h, 1, V, Shape::Normal), V, rows);
    expect_same(cpu, dev, rows);
  }
}

// Grammar masks: the masked logits are -inf exactly where a bit is clear and unchanged elsewhere (closed form,
// on both backends), and sampling from them on both backends picks the same allowed token. Rows: all allowed,
// a sparse random set, a single token, and every other word empty.
TEST_P(SampleTest, MaskedLogitsSampleOnlyAllowedTokens) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (int64_t V : {512, 163840}) {
    SCOPED_TRACE(::testing::Message() << "V " << V);
    const int64_t R = 8, W = (V + 31) / 32 + 3;  // rows padded past the vocabulary, as a caller may
    std::vector<uint32_t> mask(size_t(R * W), ~0u);
    std::uniform_int_distribution<int64_t> tok(0, V - 1);
    for (int64_t r = 1; r < R; ++r) {
      uint32_t* w = mask.data() + r * W;
      std::fill(w, w + W, 0u);
      const int n = r == 1 ? 1 : r == 2 ? int(V / 3) : 1 + int(r) * 5;
      for (int k = 0; k < n; ++k) {
        const int64_t t = tok(h.rng());
        w[t / 32] |= 1u << (t % 32);
      }
    }
    const std::vector<float> l = make_logits(h, R, V, Shape::Peaked);
    auto [lc, ld] = h.put_both(l, DType::F32, DType::F32, {R, V});
    auto dev_mask = h.dev().allocate(mask.size() * 4);
    ASSERT_TRUE(dev_mask.ok());
    ASSERT_TRUE(h.dev().copy_to_device(dev_mask->data(), mask.data(), mask.size() * 4).ok());
    ASSERT_TRUE(h.cpu().mask_logits({lc.view, mask.data(), W}).ok());
    ASSERT_TRUE(h.dev().mask_logits({ld.view, static_cast<const uint32_t*>(dev_mask->data()), W}).ok());
    const std::vector<float> cpu = h.get(h.cpu(), lc.view), dev = h.get(h.dev(), ld.view);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t t = 0; t < V; ++t) {
        const bool allowed = (mask[size_t(r * W + t / 32)] >> (t % 32)) & 1u;
        const float want = allowed ? l[size_t(r * V + t)] : -INFINITY;
        ASSERT_EQ(cpu[size_t(r * V + t)], want) << "cpu row " << r << " token " << t;
        ASSERT_EQ(dev[size_t(r * V + t)], want) << "device row " << r << " token " << t;
      }
    for (float temperature : {0.0f, 1.0f, 2.0f}) {
      std::vector<backend::SamplingRow> rows;
      for (int64_t r = 0; r < R; ++r) rows.push_back({temperature, 1.0f, 0.0f, 0, uint64_t(h.seed()) + uint64_t(r), 3});
      auto [ids_cpu, ids_dev] = run(h, cpu, V, rows);
      expect_same(ids_cpu, ids_dev, rows);
      for (int64_t r = 0; r < R; ++r) {
        const int64_t t = int64_t(ids_cpu[size_t(r)]);
        EXPECT_TRUE((mask[size_t(r * W + t / 32)] >> (t % 32)) & 1u) << "row " << r << " sampled masked token " << t;
      }
    }
  }
}

// nonfinite_rows flags exactly the rows holding a NaN or an infinity (the sampler ends those requests),
// wherever in the row it is, and no finite row however large its values; checked against std::isfinite on the
// host.
TEST_P(SampleTest, NonfiniteRowsFlagsRowsWithNanOrInfinity) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (int64_t V : {512, 163840}) {
    SCOPED_TRACE(::testing::Message() << "V " << V);
    const int64_t R = 9;
    std::vector<float> l = make_logits(h, R, V, Shape::Normal);
    std::uniform_int_distribution<int64_t> tok(0, V - 1);
    l[size_t(1 * V)] = NAN;          // first logit
    l[size_t(2 * V + V - 1)] = NAN;  // last logit
    l[size_t(3 * V + tok(h.rng()))] = INFINITY;
    l[size_t(4 * V + tok(h.rng()))] = -INFINITY;
    std::fill(l.begin() + 5 * V, l.begin() + 6 * V, NAN);  // a whole row
    l[size_t(6 * V + tok(h.rng()))] = 3.0e38f;             // large but finite
    l[size_t(7 * V + tok(h.rng()))] = -3.0e38f;
    std::vector<int32_t> want(size_t(R), 0);
    for (int64_t r = 0; r < R; ++r)
      want[size_t(r)] =
          std::all_of(l.begin() + r * V, l.begin() + (r + 1) * V, [](float x) { return std::isfinite(x); })
              ? 0
              : 1;
    ASSERT_EQ(want, (std::vector<int32_t>{0, 1, 1, 1, 1, 1, 0, 0, 0}));
    auto [lc, ld] = h.put_both(l, DType::F32, DType::F32, {R, V});
    BackendTensor oc = h.empty(h.cpu(), DType::I32, {R}), od = h.empty(h.dev(), DType::I32, {R});
    const std::vector<int32_t> junk(size_t(R), 7);  // every flag must be written, 0 or 1
    ASSERT_TRUE(h.dev().copy_to_device(od.view.data, junk.data(), junk.size() * 4).ok());
    ASSERT_TRUE(h.cpu().nonfinite_rows({lc.view, oc.view}).ok());
    const Status st = h.dev().nonfinite_rows({ld.view, od.view});
    ASSERT_TRUE(st.ok()) << st.to_string();
    const std::vector<float> cpu = h.get(h.cpu(), oc.view), dev = h.get(h.dev(), od.view);
    for (int64_t r = 0; r < R; ++r) {
      EXPECT_EQ(int(cpu[size_t(r)]), want[size_t(r)]) << "cpu row " << r;
      EXPECT_EQ(int(dev[size_t(r)]), want[size_t(r)]) << "device row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, SampleTest, ::testing::ValuesIn(tested_backends()));

}  // namespace
}  // namespace rill::testing
