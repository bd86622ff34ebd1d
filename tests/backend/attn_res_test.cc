// Cross-backend test of attn_res_mix (K3 Block AttnRes depth mix) against the CPU reference at K3's width and
// candidate counts (the 16-byte CUDA path), and at a width that is not a multiple of 8 (the scalar path), for
// the model's fp32 AttnRes state and for bf16 candidates and outputs.
#include <vector>

#include "backend/op_harness.h"

namespace rill::testing {
namespace {

// bf16 candidates and output vs fp32: one rounding of the output plus the bf16 inputs' effect on the logits.
constexpr double kMixTol = 1e-2;
// fp32 candidates and output: the same sums in another order (block reductions vs the CPU's sequential sums).
constexpr double kMixTolF32 = 1e-5;

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
  for (const auto& [N, T, H] : cases)
    for (DType v_dtype : {DType::F32, DType::BF16})
      for (DType out_dtype : {DType::F32, DType::BF16}) {
        SCOPED_TRACE(::testing::Message() << "N " << N << " T " << T << " H " << H << " candidates "
                                          << dtype_name(v_dtype) << " out " << dtype_name(out_dtype));
        const bool exact = v_dtype == DType::F32 && out_dtype == DType::F32;
        auto [vc, vd] = h.put_both(h.randn(N * T * H, 2.0f, !exact), DType::F32, v_dtype, {N, T, H});
        auto [nc, nd] = h.put_both(h.uniform(H, 0.5f, 1.5f), DType::F32, DType::F32, {H});
        // A sharp pseudo-query (scores spread over several units) as well as a mild one.
        auto [pc, pd] = h.put_both(h.randn(H, T == 7 ? 0.5f : 0.05f), DType::F32, DType::F32, {H});
        BackendTensor yc = h.empty(h.cpu(), DType::F32, {T, H}), yd = h.empty(h.dev(), out_dtype, {T, H});
        ASSERT_TRUE(h.cpu().attn_res_mix({vc.view, nc.view, pc.view, 1e-5f, yc.view}).ok());
        const Status st = h.dev().attn_res_mix({vd.view, nd.view, pd.view, 1e-5f, yd.view});
        ASSERT_TRUE(st.ok()) << st.to_string();
        EXPECT_LE(rel_l2(h.get(h.dev(), yd.view), h.get(h.cpu(), yc.view)), exact ? kMixTolF32 : kMixTol);
      }
}

INSTANTIATE_TEST_SUITE_P(Backends, AttnResTest, ::testing::ValuesIn(tested_backends()));

}  // namespace
}  // namespace rill::testing
