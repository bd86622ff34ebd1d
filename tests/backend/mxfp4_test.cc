// Cross-backend test of GEMMs on MXFP4-packed weights (K3's routed experts, weight-only) against the CPU
// reference, whose dequantisation is checked bit for bit in tests/backend/cpu/mxfp4_test.cc. The CUDA
// weight-only kernel is a later step: while the backend answers Unimplemented the test skips.
#include <vector>

#include "backend/op_harness.h"

namespace rill::testing {
namespace {

class Mxfp4Test : public ::testing::TestWithParam<std::string> {};

TEST_P(Mxfp4Test, GemmOnPackedWeightsMatchesTheCpu) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  const int64_t M = 9, N = 3072, K = 3584;  // a K3 expert's w1 over the latent width
  std::vector<float> codes(static_cast<size_t>(N * K / 2)), scales(static_cast<size_t>(N * K / 32));
  for (auto& c : codes) c = float(h.rng()() & 0xFF);
  for (auto& s : scales) s = float(114 + h.rng()() % 8);
  auto [wc, wd] = h.put_both(codes, DType::U8, DType::U8, {N, K / 2});
  auto [sc, sd] = h.put_both(scales, DType::U8, DType::U8, {N, K / 32});
  auto [xc, xd] = h.put_both(h.randn(M * K), DType::F32, DType::BF16, {M, K});
  const backend::LinearWeight w_cpu{wc.view, sc.view, backend::WeightFormat::Mxfp4};
  const backend::LinearWeight w_dev{wd.view, sd.view, backend::WeightFormat::Mxfp4};
  BackendTensor yc = h.empty(h.cpu(), DType::F32, {M, N}), yd = h.empty(h.dev(), DType::BF16, {M, N});
  ASSERT_TRUE(h.cpu().gemm({xc.view, &w_cpu, yc.view}).ok());
  const Status st = h.dev().gemm({xd.view, &w_dev, yd.view});
  if (st.code() == StatusCode::Unimplemented) GTEST_SKIP() << st.message();
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_LE(rel_l2(h.get(h.dev(), yd.view), h.get(h.cpu(), yc.view)), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Backends, Mxfp4Test, ::testing::ValuesIn(tested_backends()));

}  // namespace
}  // namespace rill::testing
