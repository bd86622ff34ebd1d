// FP8 E4M3 on the CPU reference against the format's definition, written out here independently of
// core/dtype.cc and backend/cpu/fp8.h: all 256 codes decode to the closed form, every finite code re-encodes
// to itself, midpoints round to the even code, large values saturate; the GEMM and expert paths on FP8 weights
// with block and per-channel scales equal the same weights dequantised by that closed form.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/fp8.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "test_seed.h"

namespace rill::backend {
namespace {

// E4M3 (OCP, "fn"): sign bit 7, exponent bits 6..3 (bias 7), mantissa bits 2..0; exponent 0 is subnormal
// (m * 2^-9); S.1111.111 is NaN; no infinities.
double e4m3(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return NAN;
  const double mag = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

TEST(Fp8, All256CodesDecodeToTheClosedForm) {
  for (int c = 0; c < 256; ++c) {
    const double want = e4m3(c);
    const float got = f8e4m3_to_f32(uint8_t(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
      continue;
    }
    EXPECT_EQ(double(got), want) << "code " << c;
    EXPECT_EQ(cpu::e4m3_values()[c], got) << "code " << c;
  }
  EXPECT_EQ(e4m3(0x7e), 448.0);
  EXPECT_EQ(e4m3(0x01), std::ldexp(1.0, -9));
}

TEST(Fp8, EncodeIsRoundToNearestEvenAndSaturates) {
  for (int c = 0; c < 256; ++c) {
    const double v = e4m3(c);
    if (std::isnan(v)) continue;
    EXPECT_EQ(int(f32_to_f8e4m3(float(v))), c) << "code " << c << " = " << v;
  }
  // Between consecutive positive codes: just below the midpoint goes down, just above goes up, the midpoint
  // itself to the even code (both signs).
  for (int c = 0; c < 126; ++c) {
    const double lo = e4m3(c), hi = e4m3(c + 1), mid = (lo + hi) / 2;
    const int even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(int(f32_to_f8e4m3(float(mid))), even) << "midpoint of codes " << c << ", " << c + 1;
    EXPECT_EQ(int(f32_to_f8e4m3(-float(mid))), 0x80 | even) << "negative midpoint of codes " << c;
    EXPECT_EQ(int(f32_to_f8e4m3(std::nextafter(float(mid), -1.0f))), c) << "below midpoint " << c;
    EXPECT_EQ(int(f32_to_f8e4m3(std::nextafter(float(mid), 1e9f))), c + 1) << "above midpoint " << c;
  }
  EXPECT_EQ(f32_to_f8e4m3(449.0f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_f8e4m3(NAN), 0x7f);
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(1.0f, -11)), 0x00);  // a quarter of the smallest subnormal: to zero
  EXPECT_EQ(f32_to_f8e4m3(-0.0f), 0x80);
}

// Random FP8 codes (no NaN) and positive scales for a [rows, cols] weight in blocks `b`.
struct Fp8Matrix {
  HostTensor codes, scales;
  Fp8Blocks block;
  std::vector<float> dense;  // the closed-form dequantisation
};

Fp8Matrix random_fp8(int64_t rows, int64_t cols, Fp8Blocks b, std::mt19937& rng) {
  Fp8Matrix m;
  m.block = b;
  m.codes = HostTensor::zeros(DType::F8E4M3, {rows, cols});
  m.scales = HostTensor::zeros(DType::F32, {b.scale_rows(rows), b.scale_cols(cols)});
  std::uniform_int_distribution<int> code(0, 254);
  std::uniform_real_distribution<float> scale(1e-4f, 1e-2f);
  for (int64_t i = 0; i < m.scales.view.numel(); ++i) m.scales.view.ptr<float>()[i] = scale(rng);
  m.dense.resize(size_t(rows * cols));
  const int64_t bc = std::min<int64_t>(b.cols, cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      int q = code(rng);
      if (q == 0x7f) q = 0x7e;  // NaN code
      m.codes.view.ptr<uint8_t>()[r * cols + c] = uint8_t(q);
      const float s = m.scales.view.ptr<float>()[(r / b.rows) * m.scales.view.size(1) + c / bc];
      m.dense[size_t(r * cols + c)] = float(e4m3(q)) * s;
    }
  return m;
}

class Fp8Gemm : public ::testing::TestWithParam<Fp8Blocks> {};

TEST_P(Fp8Gemm, EqualsTheDequantisedDenseGemm) {
  const uint32_t seed = testing::test_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  auto be = make_cpu_backend();
  // Odd shapes: partial blocks at the bottom and right edges.
  for (auto [M, N, K] : {std::tuple{3, 200, 300}, std::tuple{1, 128, 256}, std::tuple{5, 33, 129}}) {
    const Fp8Matrix w8 = random_fp8(N, K, GetParam(), rng);
    LinearWeight fp8{w8.codes.view, w8.scales.view, WeightFormat::Fp8, w8.block};
    HostTensor dense = HostTensor::zeros(DType::F32, {N, K});
    std::copy(w8.dense.begin(), w8.dense.end(), dense.view.ptr<float>());
    LinearWeight ref{dense.view, {}, WeightFormat::Dense};
    HostTensor x = HostTensor::zeros(DType::F32, {M, K});
    std::normal_distribution<float> g;
    for (int64_t i = 0; i < x.view.numel(); ++i) x.view.ptr<float>()[i] = g(rng);
    HostTensor y = HostTensor::zeros(DType::F32, {M, N}), y_ref = HostTensor::zeros(DType::F32, {M, N});
    ASSERT_TRUE(be->gemm({x.view, &fp8, y.view}).ok());
    ASSERT_TRUE(be->gemm({x.view, &ref, y_ref.view}).ok());
    for (int64_t i = 0; i < y.view.numel(); ++i)
      ASSERT_EQ(y.view.ptr<float>()[i], y_ref.view.ptr<float>()[i]) << "M N K " << M << " " << N << " " << K;
  }
}

INSTANTIATE_TEST_SUITE_P(Blocks, Fp8Gemm,
                         ::testing::Values(Fp8Blocks{128, 128}, Fp8Blocks{1, Fp8Blocks::kWholeRow}, Fp8Blocks{64, 128}));

// Backend::quantize_fp8 (`--quantization fp8` at load) against its definition, with this file's own decoder:
// each block's scale is its amax / 448 (1 for an all-zero block), and each code is the E4M3 code nearest to
// value / scale (ties: the even code; the test scans every code), so dequantised it is within half a step.
// Blocks of 128 x 128, per channel and 64 x 128, on shapes that end in partial blocks; bf16 and f32 sources.
class Fp8Quantize : public ::testing::TestWithParam<Fp8Blocks> {};

TEST_P(Fp8Quantize, ScalesAreBlockAmaxOver448AndCodesTheNearest) {
  const uint32_t seed = testing::test_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const Fp8Blocks b = GetParam();
  auto be = make_cpu_backend();
  for (DType from : {DType::BF16, DType::F32})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{200, 136}, {128, 256}, {7, 300}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(from) << " " << rows << " x " << cols);
      HostTensor src = HostTensor::zeros(from, {rows, cols});
      std::normal_distribution<float> g;
      std::vector<float> v(size_t(rows * cols));
      for (int64_t i = 0; i < rows * cols; ++i) {
        // Magnitudes over many binades, and an all-zero first row block in the 128 x 128 case.
        const float x = (i / cols < b.rows && b.rows > 1) ? 0.0f : g(rng) * std::ldexp(1.0f, int(i % 13) - 6);
        if (from == DType::BF16) src.view.ptr<uint16_t>()[i] = f32_to_bf16(x);
        else src.view.ptr<float>()[i] = x;
        v[size_t(i)] = load_as_f32(src.view.data, from, size_t(i));
      }
      HostTensor codes = HostTensor::zeros(DType::F8E4M3, {rows, cols});
      HostTensor scales = HostTensor::zeros(DType::F32, {b.scale_rows(rows), b.scale_cols(cols)});
      ASSERT_TRUE(be->quantize_fp8({src.view, codes.view, scales.view, b}).ok());
      const int64_t bc = std::min<int64_t>(b.cols, cols), sc = b.scale_cols(cols);
      std::vector<float> amax(size_t(b.scale_rows(rows) * sc), 0.0f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          float& m = amax[size_t((r / b.rows) * sc + c / bc)];
          m = std::max(m, std::fabs(v[size_t(r * cols + c)]));
        }
      for (size_t k = 0; k < amax.size(); ++k)
        ASSERT_EQ(scales.view.ptr<float>()[k], amax[k] > 0 ? amax[k] / 448.0f : 1.0f) << "block " << k;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const double x = double(v[size_t(r * cols + c)] / scales.view.ptr<float>()[(r / b.rows) * sc + c / bc]);
          const int q = codes.view.ptr<uint8_t>()[r * cols + c];
          double best = INFINITY;  // the distance of the nearest finite code
          for (int k = 0; k < 256; ++k)
            if (!std::isnan(e4m3(k))) best = std::min(best, std::fabs(e4m3(k) - x));
          ASSERT_EQ(std::fabs(e4m3(q) - x), best) << "row " << r << " col " << c << ": " << x << " -> code " << q;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Blocks, Fp8Quantize,
                         ::testing::Values(Fp8Blocks{128, 128}, Fp8Blocks{1, Fp8Blocks::kWholeRow}, Fp8Blocks{64, 128}));

TEST(Fp8, GemmRefusesMisshapedScales) {
  auto be = make_cpu_backend();
  HostTensor codes = HostTensor::zeros(DType::F8E4M3, {200, 256});
  HostTensor scales = HostTensor::zeros(DType::F32, {1, 2});  // 200 rows need 2 block rows
  LinearWeight w{codes.view, scales.view, WeightFormat::Fp8, {128, 128}};
  HostTensor x = HostTensor::zeros(DType::F32, {1, 256}), y = HostTensor::zeros(DType::F32, {1, 200});
  const Status s = be->gemm({x.view, &w, y.view});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("scales [2, 2]"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace rill::backend
