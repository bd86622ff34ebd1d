// MXFP4 (compressed-tensors mxfp4-pack-quantized) on the CPU reference against the spec's bit-level rules
// (spec §2.4), written out here independently of src/backend/cpu/mxfp4.h: every E2M1 code in both nibble
// positions times every E8M0 scale byte, and the GEMM and expert paths on packed weights against the same
// weights dequantised by that closed form.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/mxfp4.h"
#include "core/tensor.h"
#include "test_seed.h"

namespace rill::backend {
namespace {

// E2M1: sign = bit 3, exponent = bits 2..1 (bias 1), mantissa = bit 0. Exponent 0 is subnormal: 0.5 * m.
double e2m1(int code) {
  const int sign = code >> 3, e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
  return sign ? -mag : mag;
}

// E8M0: 2^(s - 127); 255 encodes NaN.
double e8m0(int s) {
  return s == 255 ? NAN : std::ldexp(1.0, s - 127);
}

// Closed-form W[r, c] of a packed [rows, cols/2] / scales [rows, cols/32] pair: low nibble = even column.
float reference_value(const uint8_t* packed, const uint8_t* scales, int64_t cols, int64_t r, int64_t c) {
  const uint8_t byte = packed[r * (cols / 2) + c / 2];
  const int code = (c % 2 == 0) ? (byte & 0xF) : (byte >> 4);
  return float(e2m1(code) * e8m0(scales[r * (cols / 32) + c / 32]));
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(Mxfp4, ClosedFormTableIsTheSpecsMagnitudes) {
  const double want[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) EXPECT_EQ(e2m1(c), (c & 8 ? -1 : 1) * want[c & 7]) << "code " << c;
  EXPECT_TRUE(std::signbit(e2m1(8)));  // code 8 is -0
}

TEST(Mxfp4, EveryCodeInBothNibblesTimesEveryScaleByte) {
  // Row s uses scale byte s for columns 0..31 and byte 255 - s for columns 32..63, so each scale meets each
  // code in the low nibble (even column) and in the high nibble (odd column).
  const int64_t rows = 256, cols = 64;
  HostTensor packed = HostTensor::zeros(DType::U8, {rows, cols / 2});
  HostTensor scales = HostTensor::zeros(DType::U8, {rows, cols / 32});
  for (int64_t r = 0; r < rows; ++r) {
    for (int j = 0; j < 16; ++j) {
      packed.view.ptr<uint8_t>()[r * 32 + j] = uint8_t(j | ((15 - j) << 4));       // group 0
      packed.view.ptr<uint8_t>()[r * 32 + 16 + j] = uint8_t((15 - j) | (j << 4));  // group 1
    }
    scales.view.ptr<uint8_t>()[r * 2] = uint8_t(r);
    scales.view.ptr<uint8_t>()[r * 2 + 1] = uint8_t(255 - r);
  }
  const LinearWeight w{packed.view, scales.view, WeightFormat::Mxfp4};
  ASSERT_EQ(w.in_features(), cols);
  std::vector<float> row(static_cast<size_t>(cols));
  int checked = 0;
  for (int64_t r = 0; r < rows; ++r) {
    cpu::dequant_mxfp4_row(w, r, row.data());
    for (int64_t c = 0; c < cols; ++c) {
      const float want = reference_value(packed.view.ptr<uint8_t>(), scales.view.ptr<uint8_t>(), cols, r, c);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(row[size_t(c)])) << "row " << r << " col " << c;
      } else {  // bit-exact, so -0 and subnormal results count too
        EXPECT_EQ(bits(row[size_t(c)]), bits(want))
            << "row " << r << " col " << c << ": " << row[size_t(c)] << " vs " << want;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 256 * 64);
}

// Random packed bytes with scales in the range real checkpoints use (≈ 112-122), and their dense F32 copy.
struct PackedMatrix {
  HostTensor packed, scales, dense;
  PackedMatrix(int64_t rows, int64_t cols, std::mt19937& rng)
      : packed(HostTensor::zeros(DType::U8, {rows, cols / 2})),
        scales(HostTensor::zeros(DType::U8, {rows, cols / 32})),
        dense(HostTensor::zeros(DType::F32, {rows, cols})) {
    for (int64_t i = 0; i < packed.view.numel(); ++i) packed.view.ptr<uint8_t>()[i] = uint8_t(rng() & 0xFF);
    for (int64_t i = 0; i < scales.view.numel(); ++i)
      scales.view.ptr<uint8_t>()[i] = uint8_t(112 + rng() % 11);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        dense.view.ptr<float>()[r * cols + c] =
            reference_value(packed.view.ptr<uint8_t>(), scales.view.ptr<uint8_t>(), cols, r, c);
  }
};

HostTensor random_f32(Shape shape, std::mt19937& rng) {
  HostTensor t = HostTensor::zeros(DType::F32, shape);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int64_t i = 0; i < t.view.numel(); ++i) t.view.ptr<float>()[i] = n(rng);
  return t;
}

std::vector<float> to_vector(const TensorView& v) {
  return std::vector<float>(v.ptr<float>(), v.ptr<float>() + v.numel());
}

TEST(Mxfp4, GemmOnPackedWeightsEqualsGemmOnTheDequantisedMatrix) {
  const uint32_t seed = rill::testing::test_seed();  // RILL_TEST_SEED replays
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int64_t M = 5, N = 40, K = 96;
  PackedMatrix w(N, K, rng);
  HostTensor x = random_f32({M, K}, rng);
  HostTensor y_packed = HostTensor::zeros(DType::F32, {M, N}),
             y_dense = HostTensor::zeros(DType::F32, {M, N});
  auto be = make_cpu_backend();
  const LinearWeight packed{w.packed.view, w.scales.view, WeightFormat::Mxfp4};
  const LinearWeight dense{w.dense.view, {}, WeightFormat::Dense};
  ASSERT_TRUE(be->gemm({x.view, &packed, y_packed.view}).ok());
  ASSERT_TRUE(be->gemm({x.view, &dense, y_dense.view}).ok());
  EXPECT_EQ(to_vector(y_packed.view), to_vector(y_dense.view));  // same fp32 values, same order: bit-equal
}

TEST(Mxfp4, ExpertsOnPackedWeightsEqualExpertsOnTheDequantisedWeights) {
  const uint32_t seed = rill::testing::test_seed();  // RILL_TEST_SEED replays
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int64_t E = 4, I = 32, Hx = 64, T = 6, k = 2;
  PackedMatrix gate_up(E * 2 * I, Hx, rng), down(E * Hx, I, rng);
  ExpertWeights packed;
  packed.format = WeightFormat::Mxfp4;
  packed.gate_up = gate_up.packed.view.reshape({E, 2 * I, Hx / 2});
  packed.gate_up_scales = gate_up.scales.view.reshape({E, 2 * I, Hx / 32});
  packed.down = down.packed.view.reshape({E, Hx, I / 2});
  packed.down_scales = down.scales.view.reshape({E, Hx, I / 32});
  ExpertWeights dense;
  dense.gate_up = gate_up.dense.view.reshape({E, 2 * I, Hx});
  dense.down = down.dense.view.reshape({E, Hx, I});
  ASSERT_EQ(packed.width(), Hx);
  ASSERT_EQ(packed.intermediate(), I);

  HostTensor x = random_f32({T, Hx}, rng);
  HostTensor ids = HostTensor::zeros(DType::I32, {T, k}), weights = HostTensor::zeros(DType::F32, {T, k});
  for (int64_t t = 0; t < T; ++t) {
    ids.view.ptr<int32_t>()[t * k] = int32_t(t % E);
    ids.view.ptr<int32_t>()[t * k + 1] = int32_t((t + 1 + rng() % (E - 1)) % E);
    weights.view.ptr<float>()[t * k] = 0.7f;
    weights.view.ptr<float>()[t * k + 1] = 0.3f;
  }
  auto be = make_cpu_backend();
  auto run = [&](const ExpertWeights& ex) {
    HostTensor out = HostTensor::zeros(DType::F32, {T, Hx});
    MoeExpertsArgs a;
    a.x = x.view;
    a.ids = ids.view;
    a.weights = weights.view;
    a.experts = &ex;
    a.activation = Activation::Situ;
    a.beta = 4.0f;
    a.linear_beta = 25.0f;
    a.out = out.view;
    EXPECT_TRUE(be->moe_experts(a).ok());
    return to_vector(out.view);
  };
  const std::vector<float> got = run(packed), want = run(dense);
  EXPECT_EQ(got, want);
  float mag = 0;
  for (float v : got) mag = std::max(mag, std::fabs(v));
  EXPECT_GT(mag, 0.0f);  // not trivially zero
}

}  // namespace
}  // namespace rill::backend
