// Cross-backend test of attn_res_mix (K3 Block AttnRes depth mix) against the CPU reference at K3's width and
// candidate counts (the 16-byte CUDA path), and at a width that is not a multiple of 8 (the scalar path).
#include <vector>

#include "backend/op_harness.h"

namespace rill::testing {
namespace {

// bf16 candidates and output vs fp32: one rounding of the output plus the bf16 inputs' effect on the logits.
constexpr double kMixTol = 1e-2;

class AttnResTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AttnResTest, DepthMixMatchesTheCpu) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  struct Case {
    int64_t N, T, H;
  };
  std::vector<Case> cases;
  for (int64_t N : {1, 2, 5, 9})  // K3: at most 8 snapshots + the partial sum
    for (int64_t T : {1, 7, 300}) cases.push_back({N, T, 7168});
  cases.push_back({3, 5, 100});  // odd width: scalar loads
  for (const auto& [N, T, H] : cases) {
    SCOPED_TRACE(::testing::Message() << "N " << N << " T " << T << " H " << H);
    auto [vc, vd] = h.put_both(h.randn(N * T * H, 2.0f), DType::F32, DType::BF16, {N, T, H});
    auto [nc, nd] = h.put_both(h.uniform(H, 0.5f, 1.5f), DType::F32, DType::F32, {H});
    auto [pc, pd] = h.put_both(h.randn(H, 0.05f), DType::F32, DType::F32, {H});
    BackendTensor yc = h.empty(h.cpu(), DType::F32, {T, H}), yd = h.empty(h.dev(), DType::BF16, {T, H});
    ASSERT_TRUE(h.cpu().attn_res_mix({vc.view, nc.view, pc.view, 1e-5f, yc.view}).ok());
    const Status st = h.dev().attn_res_mix({vd.view, nd.view, pd.view, 1e-5f, yd.view});
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_LE(rel_l2(h.get(h.dev(), yd.view), h.get(h.cpu(), yc.view)), kMixTol);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, AttnResTest, ::testing::ValuesIn(tested_backends()));

}  // namespace
}  // namespace rill::testing
