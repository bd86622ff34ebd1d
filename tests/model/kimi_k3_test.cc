// The CPU Kimi K3 model on a fresh tiny checkpoint in the real K3 layout (random seed each run): the Block
// AttnRes wiring of spec §3.9 checked tap by tap against the formula, MXFP4 experts against the same experts
// dequantised to BF16, and the usual consistency: one-shot vs chunked vs token-by-token prefill, and a ragged
// batch vs each sequence alone.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "model/fixture.h"
#include "model/k3_checkpoint.h"
#include "model/ragged_batch.h"
#include "model/sequence_session.h"
#include "test_seed.h"

namespace rill {
namespace {

namespace fs = std::filesystem;
using testing::max_abs_diff;

class KimiK3Model : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    seed_ = rill::testing::test_seed();
    dir_ = new testing::TempDir("k3_model");
    ASSERT_TRUE(testing::write_tiny_k3(dir_->path(), seed_, 2).ok());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    trace_ = std::make_unique<::testing::ScopedTrace>(__FILE__, __LINE__,
                                                      "checkpoint seed (RILL_TEST_SEED) " + std::to_string(seed_));
  }

  static std::unique_ptr<model::Model> load(backend::Backend& be, const fs::path& dir) {
    return testing::load_fixture_model(dir, be);
  }
  static std::vector<int32_t> random_tokens(int n, std::mt19937& rng) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(rng() % uint32_t(testing::kTinyK3Vocab));
    return t;
  }
  static std::vector<float> prompt_logits(model::Model& m, const std::vector<int32_t>& ids, int chunk) {
    auto s = model::SequenceSession::create(m, 512);
    EXPECT_TRUE(s.ok());
    auto l = s->feed(ids, chunk, true);
    EXPECT_TRUE(l.ok()) << l.status().to_string();
    return l.ok() ? *l : std::vector<float>{};
  }

  static uint32_t seed_;
  static testing::TempDir* dir_;
  std::unique_ptr<::testing::ScopedTrace> trace_;
};

uint32_t KimiK3Model::seed_ = 0;
testing::TempDir* KimiK3Model::dir_ = nullptr;

// --- Block AttnRes wiring -------------------------------------------------------------------------------

// A checkpoint vector (BF16 or F32) as floats.
std::vector<float> read_vector(const io::Checkpoint& c, const std::string& name) {
  const io::Checkpoint::Entry* e = c.find(name);
  EXPECT_NE(e, nullptr) << name;
  if (!e) return {};
  const TensorView v = c.view(*e);
  std::vector<float> out(static_cast<size_t>(v.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_f32(v.data, v.dtype, i);
  return out;
}

// Mix(B, P; w) of spec §3.9 in double: per token, softmax over candidates of rsqrt(mean(V^2)+eps) V .
// (norm*proj).
std::vector<float> mix(const std::vector<const std::vector<float>*>& cands, const std::vector<float>& norm,
                       const std::vector<float>& proj, int64_t H) {
  const int64_t T = int64_t(cands[0]->size()) / H;
  std::vector<float> out(static_cast<size_t>(T * H));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> z;
    for (const auto* c : cands) {
      double ms = 0, s = 0;
      for (int64_t i = 0; i < H; ++i) ms += double((*c)[size_t(t * H + i)]) * (*c)[size_t(t * H + i)];
      for (int64_t i = 0; i < H; ++i)
        s += double((*c)[size_t(t * H + i)]) * norm[size_t(i)] * proj[size_t(i)];
      z.push_back(s / std::sqrt(ms / double(H) + 1e-5));
    }
    double zmax = z[0], sum = 0;
    for (double q : z) zmax = std::max(zmax, q);
    for (double& q : z) sum += (q = std::exp(q - zmax));
    for (int64_t i = 0; i < H; ++i) {
      double acc = 0;
      for (size_t j = 0; j < cands.size(); ++j) acc += z[j] / sum * (*cands[j])[size_t(t * H + i)];
      out[size_t(t * H + i)] = float(acc);
    }
  }
  return out;
}

std::vector<float> sum(std::initializer_list<const std::vector<float>*> parts) {
  std::vector<float> out(parts.begin()[0]->size(), 0.0f);
  for (const auto* p : parts)
    for (size_t i = 0; i < out.size(); ++i) out[i] += (*p)[i];
  return out;
}

TEST_F(KimiK3Model, BlockAttnResFollowsTheSpecLayerByLayer) {
  auto be = backend::make_cpu_backend();
  auto m = load(*be, dir_->path());
  ASSERT_TRUE(m);
  const int64_t H = m->config().hidden_size;
  ASSERT_EQ(m->config().attn_res_block_size, 3);
  ASSERT_EQ(m->config().n_layers, 7);
  model::TapRecorder taps;
  m->set_tap_recorder(&taps);
  std::mt19937 rng(seed_);
  (void)prompt_logits(*m, random_tokens(37, rng), 0);
  m->set_tap_recorder(nullptr);
  std::map<std::string, std::vector<float>> tap;
  for (const auto& t : taps.taps()) tap[t.name] = t.values;
  auto ckpt = io::Checkpoint::open(dir_->path());
  ASSERT_TRUE(ckpt.ok());
  auto w = [&](int layer, const std::string& what) {
    const std::string p =
        layer < 0 ? "language_model.model." : "language_model.model.layers." + std::to_string(layer) + ".";
    return std::make_pair(read_vector(*ckpt, p + what + "_norm.weight"),
                          read_vector(*ckpt, p + what + "_proj.weight"));
  };
  auto expect_close = [](const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    float worst = 0, mag = 0;
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::fabs(got[i] - want[i])), mag = std::max(mag, std::fabs(want[i]));
    EXPECT_LE(worst, 1e-5f * (1 + mag)) << what;
  };
  const auto& h0 = tap["embed"];
  // Layer 0: no snapshots yet, so the mixer sees the embedding; then B = [h0] and P = a0.
  EXPECT_EQ(tap["L0.attn_res"], h0);
  auto [n0, p0] = w(0, "mlp_res");
  expect_close(tap["L0.mlp_res"], mix({&h0, &tap["L0.mixer_out"]}, n0, p0, H),
               "L0 mlp input = Mix([h0, a0])");
  // Within a block P accumulates every sublayer output.
  const auto block0 = sum({&tap["L0.mixer_out"], &tap["L0.ffn_out"], &tap["L1.mixer_out"], &tap["L1.ffn_out"],
                           &tap["L2.mixer_out"], &tap["L2.ffn_out"]});
  expect_close(tap["L2.partial"], block0, "P after layer 2 = sum of block 0's sublayer outputs");
  // Layer 3 opens a block: its attention input still mixes the finished block's P, then P is pushed.
  auto [n3a, p3a] = w(3, "self_attention_res");
  expect_close(tap["L3.attn_res"], mix({&h0, &tap["L2.partial"]}, n3a, p3a, H), "L3 attention input");
  auto [n3m, p3m] = w(3, "mlp_res");
  expect_close(tap["L3.mlp_res"], mix({&h0, &tap["L2.partial"], &tap["L3.mixer_out"]}, n3m, p3m, H),
               "L3 mlp input");
  auto [n4a, p4a] = w(4, "self_attention_res");
  expect_close(tap["L4.attn_res"], mix({&h0, &tap["L2.partial"], &tap["L3.partial"]}, n4a, p4a, H),
               "L4 attention input");
  // The final mix: B = [h0, block 0, block 1] and the last block's P (layer 6 alone).
  auto [no, po] = w(-1, "output_attn_res");
  expect_close(tap["residual"],
               mix({&h0, &tap["L2.partial"], &tap["L5.partial"], &tap["L6.partial"]}, no, po, H),
               "output mix");
  expect_close(tap["L6.partial"], sum({&tap["L6.mixer_out"], &tap["L6.ffn_out"]}), "P of the last block");
}

// --- MXFP4 experts --------------------------------------------------------------------------------------

// Spec §2.4 closed form: E2M1 code (sign bit 3, exponent bits 2-1, mantissa bit 0) times 2^(scale - 127).
float dequant(uint8_t byte, bool high, uint8_t scale) {
  const int code = high ? byte >> 4 : byte & 0xF;
  const int e = (code >> 1) & 3, mnt = code & 1;
  const double mag = e == 0 ? 0.5 * mnt : std::ldexp(1.0 + 0.5 * mnt, e - 1);
  return float((code & 8 ? -mag : mag) * std::ldexp(1.0, int(scale) - 127));
}

TEST_F(KimiK3Model, Mxfp4ExpertsEqualTheSameExpertsDequantisedToBf16) {
  // The dequantised values are exact in BF16 (spec §2.4), so the fp32 CPU forward must not change at all.
  testing::TempDir dense("k3_model_dense");
  ASSERT_TRUE(testing::copy_checkpoint(
                  dir_->path(), dense.path(),
                  [](std::vector<io::NamedTensor>& t, std::vector<HostTensor>& owned) {
                    std::map<std::string, TensorView> scales;
                    for (const auto& x : t)
                      if (x.name.ends_with(".weight_scale"))
                        scales[x.name.substr(0, x.name.size() - 13)] = x.view;
                    std::vector<io::NamedTensor> out;
                    for (const auto& x : t) {
                      if (x.name.ends_with(".weight_scale")) continue;
                      if (!x.name.ends_with(".weight_packed")) {
                        out.push_back(x);
                        continue;
                      }
                      const std::string base = x.name.substr(0, x.name.size() - 14);
                      const TensorView s = scales.at(base);
                      const int64_t rows = x.view.size(0), cols = x.view.size(1) * 2;
                      owned.push_back(HostTensor::zeros(DType::BF16, {rows, cols}));
                      for (int64_t r = 0; r < rows; ++r)
                        for (int64_t c = 0; c < cols; ++c) {
                          const float v = dequant(x.view.ptr<uint8_t>()[r * (cols / 2) + c / 2], c % 2 == 1,
                                                  s.ptr<uint8_t>()[r * (cols / 32) + c / 32]);
                          owned.back().view.ptr<uint16_t>()[r * cols + c] = f32_to_bf16(v);
                          EXPECT_EQ(bf16_to_f32(f32_to_bf16(v)), v);
                        }
                      out.push_back({base + ".weight", owned.back().view});
                    }
                    t = std::move(out);
                  },
                  [](auto& c) { c["text_config"].erase("quantization_config"); })
                  .ok());
  auto be = backend::make_cpu_backend();
  auto packed = load(*be, dir_->path());
  auto bf16 = load(*be, dense.path());
  ASSERT_TRUE(packed && bf16);
  std::mt19937 rng(seed_ + 1);
  const auto ids = random_tokens(70, rng);
  EXPECT_EQ(max_abs_diff(prompt_logits(*packed, ids, 0), prompt_logits(*bf16, ids, 0)), 0.0f);
}

// --- consistency ----------------------------------------------------------------------------------------

// The bf16 yardstick of the GPU tests (tests/model/logit_compare.h) rounds selected taps to bf16 in place:
// the selected tap becomes exactly the bf16 rounding of the unrounded run's value, everything before it is
// untouched, and what follows moves (the rounded value is what the next op reads).
TEST_F(KimiK3Model, Bf16RoundingOfATapRoundsItInPlace) {
  auto be = backend::make_cpu_backend();
  auto m = load(*be, dir_->path());
  ASSERT_TRUE(m);
  std::mt19937 rng(seed_);
  const std::vector<int32_t> ids = random_tokens(12, rng);
  model::TapRecorder plain, rounded;
  rounded.set_bf16_rounding([](std::string_view n) { return n == "L1.input_norm"; });
  m->set_tap_recorder(&plain);
  const std::vector<float> a = prompt_logits(*m, ids, 0);
  m->set_tap_recorder(&rounded);
  const std::vector<float> b = prompt_logits(*m, ids, 0);
  m->set_tap_recorder(nullptr);
  ASSERT_EQ(plain.taps().size(), rounded.taps().size());
  bool before = true;
  double moved_after = 0;
  for (size_t i = 0; i < plain.taps().size(); ++i) {
    const auto& p = plain.taps()[i];
    const auto& r = rounded.taps()[i];
    ASSERT_EQ(p.name, r.name);
    if (p.name == "L1.input_norm") {
      for (size_t j = 0; j < p.values.size(); ++j)
        ASSERT_EQ(r.values[j], bf16_to_f32(f32_to_bf16(p.values[j]))) << j;
      EXPECT_GT(max_abs_diff(p.values, r.values), 0.0);  // fp32 values are not all bf16 already
      before = false;
    } else if (before) {
      EXPECT_EQ(max_abs_diff(p.values, r.values), 0.0) << p.name;
    } else {
      moved_after = std::max(moved_after, double(max_abs_diff(p.values, r.values)));
    }
  }
  EXPECT_FALSE(before) << "no tap L1.input_norm";
  EXPECT_GT(moved_after, 0.0);
  EXPECT_GT(max_abs_diff(a, b), 0.0);
}

TEST_F(KimiK3Model, ChunkedOneShotAndTokenByTokenAgree) {
  auto be = backend::make_cpu_backend();
  auto m = load(*be, dir_->path());
  ASSERT_TRUE(m);
  std::mt19937 rng(seed_ + 2);
  const auto ids = random_tokens(160, rng);  // two full KDA chunks and a partial one
  const std::vector<float> one_shot = prompt_logits(*m, ids, 0);
  float mag = 0;
  for (float v : one_shot) mag = std::max(mag, std::fabs(v));
  EXPECT_GT(mag, 0.1f);
  for (int chunk : {1, 3, 16, 64, 100})
    EXPECT_LE(max_abs_diff(prompt_logits(*m, ids, chunk), one_shot), 1e-4f) << "chunk " << chunk;
}


TEST_F(KimiK3Model, RaggedBatchEqualsSequencesAlone) {
  auto be = backend::make_cpu_backend();
  auto model = load(*be, dir_->path());
  ASSERT_TRUE(model);
  std::mt19937 rng(seed_ + 3);
  const std::vector<int> lengths = {150, 7, 70, 33};
  std::vector<std::vector<int32_t>> tokens;
  for (int n : lengths) tokens.push_back(random_tokens(n, rng));
  const std::vector<std::vector<testing::RaggedPiece>> steps = {
      {{0, 40}, {1, 3}},
      {{0, 64}, {1, 1}, {2, 50}},
      {{1, 1}, {2, 20}, {3, 33}, {0, 10}},
      {{0, 36}, {1, 1}, {3, 0}},
      {{1, 1}},
  };
  testing::expect_ragged_batch_equals_alone(*be, *model, tokens, steps);
}

}  // namespace
}  // namespace rill
