// Cross-backend tests of the norm family (src/backend/cuda/norm.cu) against the CPU reference: rms_norm and
// add_rms_norm at the test model's width, Kimi Linear's and K3's, an odd width (scalar path), strided rows
// and in place; kda_output (gated RMSNorm per token and head) with contiguous and strided inputs.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/op_harness.h"

namespace rill::testing {
namespace {

// CUDA rounds y = x * r to bf16 before the weight and the product again (spec §3.0); the CPU keeps fp32:
// two roundings, ~3e-3 rel-L2.
constexpr double kNormTol = 1e-2;

class NormTest : public ::testing::TestWithParam<std::string> {};

TEST_P(NormTest, RmsNorm) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (int64_t N : {64, 512, 2304, 7168, 100})
    for (int64_t T : {1, 7, 300})
      for (bool strided : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "N " << N << " T " << T << (strided ? " strided" : ""));
        const int64_t w = strided ? N + 64 : N;  // rows of a wider buffer
        auto [xc, xd] = h.put_both(h.randn(T * w, 3.0f), DType::F32, DType::BF16, {T, w});
        auto [gc, gd] = h.put_both(h.uniform(N, 0.5f, 1.5f, false), DType::F32, DType::F32, {N});
        BackendTensor yc = h.empty(h.cpu(), DType::F32, {T, N}), yd = h.empty(h.dev(), DType::BF16, {T, N});
        const TensorView xcv = xc.view.narrow(1, w - N, N), xdv = xd.view.narrow(1, w - N, N);
        ASSERT_TRUE(h.cpu().rms_norm({xcv, gc.view, 1e-5f, yc.view}).ok());
        ASSERT_TRUE(h.dev().rms_norm({xdv, gd.view, 1e-5f, yd.view}).ok());
        EXPECT_LE(rel_l2(h.get(h.dev(), yd.view), h.get(h.cpu(), yc.view)), kNormTol);
      }
}

// In place (the latent MoE normalises its output buffer), with the MLA latent eps.
TEST_P(NormTest, RmsNormInPlace) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  const int64_t T = 9, N = 512;
  auto [xc, xd] = h.put_both(h.randn(T * N), DType::F32, DType::BF16, {T, N});
  auto [gc, gd] = h.put_both(h.uniform(N, 0.5f, 1.5f, false), DType::F32, DType::F32, {N});
  ASSERT_TRUE(h.cpu().rms_norm({xc.view, gc.view, 1e-6f, xc.view}).ok());
  ASSERT_TRUE(h.dev().rms_norm({xd.view, gd.view, 1e-6f, xd.view}).ok());
  EXPECT_LE(rel_l2(h.get(h.dev(), xd.view), h.get(h.cpu(), xc.view)), kNormTol);
}

TEST_P(NormTest, AddRmsNorm) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (int64_t N : {64, 2304, 7168, 100})
    for (int64_t T : {1, 7, 300}) {
      SCOPED_TRACE(::testing::Message() << "N " << N << " T " << T);
      auto [rc, rd] = h.put_both(h.randn(T * N, 2.0f), DType::F32, DType::BF16, {T, N});
      auto [dc, dd] = h.put_both(h.randn(T * N), DType::F32, DType::BF16, {T, N});
      auto [gc, gd] = h.put_both(h.uniform(N, 0.5f, 1.5f, false), DType::F32, DType::F32, {N});
      BackendTensor yc = h.empty(h.cpu(), DType::F32, {T, N}), yd = h.empty(h.dev(), DType::BF16, {T, N});
      ASSERT_TRUE(h.cpu().add_rms_norm({rc.view, dc.view, gc.view, 1e-5f, yc.view}).ok());
      ASSERT_TRUE(h.dev().add_rms_norm({rd.view, dd.view, gd.view, 1e-5f, yd.view}).ok());
      // The residual: the same fp32 sum of two bf16 values, rounded once on CUDA.
      const std::vector<float> r_cpu = h.get(h.cpu(), rc.view), r_dev = h.get(h.dev(), rd.view);
      double worst = 0;
      for (size_t i = 0; i < r_cpu.size(); ++i)
        worst = std::max(worst, double(std::fabs(round_to_bf16(r_cpu[i]) - r_dev[i])));
      EXPECT_EQ(worst, 0.0) << "residual";
      EXPECT_LE(rel_l2(h.get(h.dev(), yd.view), h.get(h.cpu(), yc.view)), kNormTol);
    }
}

// The model's fp32 residual stream: F32 residual (updated exactly, no rounding), bf16 delta and output on the
// device; then rms_norm reading the F32 residual.
TEST_P(NormTest, AddRmsNormFp32Residual) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (int64_t N : {64, 2304, 100})
    for (int64_t T : {1, 7, 300}) {
      SCOPED_TRACE(::testing::Message() << "N " << N << " T " << T);
      auto [rc, rd] = h.put_both(h.randn(T * N, 2.0f), DType::F32, DType::F32, {T, N});
      auto [dc, dd] = h.put_both(h.randn(T * N), DType::F32, DType::BF16, {T, N});
      auto [gc, gd] = h.put_both(h.uniform(N, 0.5f, 1.5f, false), DType::F32, DType::F32, {N});
      BackendTensor yc = h.empty(h.cpu(), DType::F32, {T, N}), yd = h.empty(h.dev(), DType::BF16, {T, N});
      ASSERT_TRUE(h.cpu().add_rms_norm({rc.view, dc.view, gc.view, 1e-5f, yc.view}).ok());
      ASSERT_TRUE(h.dev().add_rms_norm({rd.view, dd.view, gd.view, 1e-5f, yd.view}).ok());
      // Both add the same two values (delta is exact in bf16 after put_both) in fp32: identical residuals.
      EXPECT_EQ(h.get(h.dev(), rd.view), h.get(h.cpu(), rc.view)) << "residual";
      EXPECT_LE(rel_l2(h.get(h.dev(), yd.view), h.get(h.cpu(), yc.view)), kNormTol);
      ASSERT_TRUE(h.cpu().rms_norm({rc.view, gc.view, 1e-5f, yc.view}).ok());
      ASSERT_TRUE(h.dev().rms_norm({rd.view, gd.view, 1e-5f, yd.view}).ok());
      EXPECT_LE(rel_l2(h.get(h.dev(), yd.view), h.get(h.cpu(), yc.view)), kNormTol);
    }
}

// o may be a view with a head stride wider than d (here: the first half of [T, Hk, 2d]).
TEST_P(NormTest, KdaOutputNorm) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  struct Case {
    int64_t T, Hk, d;
    bool strided;
  };
  for (const Case& c : {Case{1, 2, 128, false}, Case{7, 32, 128, false}, Case{300, 32, 128, true},
                        Case{5, 3, 64, true}, Case{4, 2, 36, false}}) {
    SCOPED_TRACE(::testing::Message()
                 << "T " << c.T << " Hk " << c.Hk << " d " << c.d << (c.strided ? " strided" : ""));
    const int64_t dw = c.strided ? 2 * c.d : c.d, P = c.Hk * c.d;
    auto [oc, od] = h.put_both(h.randn(c.T * c.Hk * dw, 0.5f), DType::F32, DType::BF16, {c.T, c.Hk, dw});
    auto [gc, gd] = h.put_both(h.randn(c.T * P, 2.0f), DType::F32, DType::BF16, {c.T, P});
    auto [wc, wd] = h.put_both(h.uniform(c.d, 0.5f, 1.5f, false), DType::F32, DType::F32, {c.d});
    BackendTensor yc = h.empty(h.cpu(), DType::F32, {c.T, P}), yd = h.empty(h.dev(), DType::BF16, {c.T, P});
    const TensorView ocv = oc.view.narrow(2, 0, c.d), odv = od.view.narrow(2, 0, c.d);
    ASSERT_TRUE(h.cpu().kda_output({ocv, gc.view, wc.view, 1e-5f, yc.view}).ok());
    ASSERT_TRUE(h.dev().kda_output({odv, gd.view, wd.view, 1e-5f, yd.view}).ok());
    // Single rounding of an fp32 result: ~2e-3.
    EXPECT_LE(rel_l2(h.get(h.dev(), yd.view), h.get(h.cpu(), yc.view)), kNormTol);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, NormTest, ::testing::ValuesIn(tested_backends()));

}  // namespace
}  // namespace rill::testing
