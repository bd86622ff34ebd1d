// Cross-backend tests of the elementwise family (src/backend/cuda/elementwise.cu) against the CPU reference:
// embed, add, glu (SiLU, SiTU; strided halves), sigmoid_gate, gather_rows and fill_random (bit-identical),
// on vector-friendly and odd widths (the 16-byte and the scalar paths).
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/op_harness.h"

namespace rill::testing {
namespace {

// glu / sigmoid_gate: the CPU keeps fp32, CUDA rounds the result (and sigmoid_gate the sigmoid) to bf16:
// ~2^-9 relative per element.
constexpr double kActTol = 1e-2;

std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = round_to_bf16(v[i]);
  return r;
}

std::vector<float> random_ids(OpHarness& h, int64_t n, int64_t hi) {
  std::uniform_int_distribution<int> d(0, int(hi) - 1);
  std::vector<float> ids(static_cast<size_t>(n));
  for (auto& v : ids) v = float(d(h.rng()));
  return ids;
}

class ElementwiseTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ElementwiseTest, EmbedCopiesRows) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (auto [V, H] : {std::pair<int64_t, int64_t>{512, 64}, {1000, 2304}, {300, 36}})
    for (int64_t T : {1, 7, 300}) {
      SCOPED_TRACE(::testing::Message() << "V " << V << " H " << H << " T " << T);
      auto [tc, td] = h.put_both(h.randn(V * H), DType::BF16, DType::BF16, {V, H});
      auto [ic, id] = h.put_both(random_ids(h, T, V), DType::I32, DType::I32, {T});
      BackendTensor yc = h.empty(h.cpu(), DType::F32, {T, H}), yd = h.empty(h.dev(), DType::BF16, {T, H});
      ASSERT_TRUE(h.cpu().embed({tc.view, ic.view, yc.view}).ok());
      ASSERT_TRUE(h.dev().embed({td.view, id.view, yd.view}).ok());
      EXPECT_EQ(max_abs(h.get(h.dev(), yd.view), h.get(h.cpu(), yc.view)), 0.0);
    }
}

// The host cannot see device ids: an id outside the vocabulary gives a zero row, never an out-of-bounds read.
TEST_P(ElementwiseTest, EmbedZeroesOutOfRangeIds) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  const int64_t V = 100, H = 64, T = 6;
  const std::vector<float> table = h.randn(V * H);
  BackendTensor td = h.put(h.dev(), table, DType::BF16, {V, H});
  BackendTensor id = h.put(h.dev(), {3, -1, 99, 100, 1000000, 0}, DType::I32, {T});
  BackendTensor yd = h.empty(h.dev(), DType::BF16, {T, H});
  ASSERT_TRUE(h.dev().embed({td.view, id.view, yd.view}).ok());
  const std::vector<float> y = h.get(h.dev(), yd.view);
  const int ids[] = {3, -1, 99, 100, 1000000, 0};
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < H; ++c) {
      const float want = ids[t] >= 0 && ids[t] < V ? table[size_t(ids[t] * H + c)] : 0.0f;
      ASSERT_EQ(y[size_t(t * H + c)], want) << "token " << t << " column " << c;
    }
}

TEST_P(ElementwiseTest, AddRoundsTheFp32Sum) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (auto [M, N] : {std::pair<int64_t, int64_t>{1, 64}, {7, 2304}, {300, 100}, {33, 7168}}) {
    SCOPED_TRACE(::testing::Message() << "M " << M << " N " << N);
    auto [ac, ad] = h.put_both(h.randn(M * N), DType::F32, DType::BF16, {M, N});
    auto [bc, bd] = h.put_both(h.randn(M * N, 0.3f), DType::F32, DType::BF16, {M, N});
    ASSERT_TRUE(h.cpu().add({ac.view, bc.view}).ok());
    ASSERT_TRUE(h.dev().add({ad.view, bd.view}).ok());
    // Both sides add the same two bf16 values in fp32; CUDA then rounds once.
    EXPECT_EQ(max_abs(h.get(h.dev(), ad.view), rounded(h.get(h.cpu(), ac.view))), 0.0);
  }
}

// An fp32 running sum plus a bf16 sublayer output (K3's AttnRes partial sum): exact fp32 addition, no rounding.
TEST_P(ElementwiseTest, AddIntoAnFp32AccumulatorIsExact) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (auto [M, N] : {std::pair<int64_t, int64_t>{1, 64}, {7, 2304}, {300, 100}, {33, 7168}}) {
    SCOPED_TRACE(::testing::Message() << "M " << M << " N " << N);
    auto [ac, ad] = h.put_both(h.randn(M * N, 1.0f, /*round_bf16=*/false), DType::F32, DType::F32, {M, N});
    auto [bc, bd] = h.put_both(h.randn(M * N, 0.3f), DType::F32, DType::BF16, {M, N});
    ASSERT_TRUE(h.cpu().add({ac.view, bc.view}).ok());
    ASSERT_TRUE(h.dev().add({ad.view, bd.view}).ok());
    EXPECT_EQ(max_abs(h.get(h.dev(), ad.view), h.get(h.cpu(), ac.view)), 0.0);
  }
  // A bf16 accumulator with an fp32 addend is not a supported pairing: refused, not misread.
  BackendTensor a = h.empty(h.dev(), DType::BF16, {2, 8}), b = h.empty(h.dev(), DType::F32, {2, 8});
  EXPECT_FALSE(h.dev().add({a.view, b.view}).ok());
}

TEST_P(ElementwiseTest, SigmoidGate) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (auto [M, N] : {std::pair<int64_t, int64_t>{1, 64}, {7, 4096}, {300, 100}}) {
    SCOPED_TRACE(::testing::Message() << "M " << M << " N " << N);
    auto [xc, xd] = h.put_both(h.randn(M * N), DType::F32, DType::BF16, {M, N});
    auto [gc, gd] = h.put_both(h.randn(M * N, 2.0f), DType::F32, DType::BF16, {M, N});
    ASSERT_TRUE(h.cpu().sigmoid_gate({xc.view, gc.view}).ok());
    ASSERT_TRUE(h.dev().sigmoid_gate({xd.view, gd.view}).ok());
    EXPECT_LE(rel_l2(h.get(h.dev(), xd.view), h.get(h.cpu(), xc.view)), kActTol);
  }
}

// gate and up are the two halves of one [M, 2I] buffer, as the dense MLP passes them.
TEST_P(ElementwiseTest, GluSiluAndSitu) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (auto act : {backend::Activation::Silu, backend::Activation::Situ})
    for (auto [M, I] : {std::pair<int64_t, int64_t>{1, 32}, {7, 1024}, {300, 9216}, {5, 30}}) {
      SCOPED_TRACE(::testing::Message()
                   << (act == backend::Activation::Silu ? "silu" : "situ") << " M " << M << " I " << I);
      // Scale 6 reaches SiTU's soft caps (beta 4, linear beta 25 on large up values).
      auto [gc, gd] = h.put_both(h.randn(M * 2 * I, act == backend::Activation::Situ ? 6.0f : 2.0f),
                                 DType::F32, DType::BF16, {M, 2 * I});
      BackendTensor yc = h.empty(h.cpu(), DType::F32, {M, I}), yd = h.empty(h.dev(), DType::BF16, {M, I});
      const float beta = act == backend::Activation::Situ ? 4.0f : 0.0f;
      const float lbeta = act == backend::Activation::Situ ? 25.0f : 0.0f;
      ASSERT_TRUE(
          h.cpu().glu({gc.view.narrow(1, 0, I), gc.view.narrow(1, I, I), yc.view, act, beta, lbeta}).ok());
      ASSERT_TRUE(
          h.dev().glu({gd.view.narrow(1, 0, I), gd.view.narrow(1, I, I), yd.view, act, beta, lbeta}).ok());
      EXPECT_LE(rel_l2(h.get(h.dev(), yd.view), h.get(h.cpu(), yc.view)), kActTol);
    }
}

TEST_P(ElementwiseTest, GatherRowsCopiesBytes) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  struct Case {
    DType dtype;
    int64_t T, N, R;
    bool strided;
  };
  for (const Case& c : {Case{DType::BF16, 50, 2304, 7, false}, Case{DType::F32, 300, 64, 300, true},
                        Case{DType::F32, 9, 3, 20, false}, Case{DType::BF16, 9, 3, 5, true}}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(c.dtype) << " T " << c.T << " N " << c.N << " R " << c.R
                                      << (c.strided ? " strided" : ""));
    const int64_t w = c.strided ? 2 * c.N : c.N;
    auto [xc, xd] = h.put_both(h.randn(c.T * w), c.dtype, c.dtype, {c.T, w});
    auto [rc, rd] = h.put_both(random_ids(h, c.R, c.T), DType::I32, DType::I32, {c.R});
    BackendTensor yc = h.empty(h.cpu(), c.dtype, {c.R, c.N}), yd = h.empty(h.dev(), c.dtype, {c.R, c.N});
    const TensorView xcv = c.strided ? xc.view.narrow(1, c.N, c.N) : xc.view;
    const TensorView xdv = c.strided ? xd.view.narrow(1, c.N, c.N) : xd.view;
    ASSERT_TRUE(h.cpu().gather_rows({xcv, rc.view, yc.view}).ok());
    ASSERT_TRUE(h.dev().gather_rows({xdv, rd.view, yd.view}).ok());
    EXPECT_EQ(max_abs(h.get(h.dev(), yd.view), h.get(h.cpu(), yc.view)), 0.0);
  }
}

// Element i depends only on (seed, i): the CUDA fill must be bit-identical to the CPU's for every dtype.
TEST_P(ElementwiseTest, FillRandomIsBitIdentical) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  struct Case {
    DType dtype;
    int64_t n;
    float lo, hi;
  };
  for (const Case& c :
       {Case{DType::F32, 1, -1, 1}, Case{DType::F32, 1000003, -0.02f, 0.05f}, Case{DType::BF16, 4099, -3, 3},
        Case{DType::BF16, 1 << 20, -0.03f, 0.03f}, Case{DType::F16, 77777, -1e-5f, 70000.0f},
        Case{DType::F16, 5000, -2, 2}, Case{DType::U8, 1000001, 0, 255}, Case{DType::U8, 513, 3, 10}}) {
    SCOPED_TRACE(::testing::Message()
                 << dtype_name(c.dtype) << " n " << c.n << " [" << c.lo << ", " << c.hi << "]");
    const size_t bytes = size_t(c.n) * dtype_size(c.dtype);
    std::vector<std::vector<char>> host(2, std::vector<char>(bytes));
    for (int side = 0; side < 2; ++side) {
      backend::Backend& be = side == 0 ? h.cpu() : h.dev();
      auto a = be.allocate(bytes);
      ASSERT_TRUE(a.ok());
      const TensorView t = TensorView::make(a->data(), c.dtype, {c.n}, be.device());
      ASSERT_TRUE(be.fill_random(t, uint64_t(h.seed()) * 7919 + uint64_t(c.n), c.lo, c.hi).ok());
      ASSERT_TRUE(be.synchronize().ok());
      ASSERT_TRUE(be.copy_to_host(host[size_t(side)].data(), a->data(), bytes).ok());
    }
    size_t first_diff = bytes;
    for (size_t i = 0; i < bytes && first_diff == bytes; ++i)
      if (host[0][i] != host[1][i]) first_diff = i;
    EXPECT_EQ(first_diff, bytes) << "first differing byte";
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ElementwiseTest, ::testing::ValuesIn(tested_backends()));

}  // namespace
}  // namespace rill::testing
