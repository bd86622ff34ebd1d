// Cross-backend tests of the dense GEMM (src/backend/cuda/gemm: cuBLASLt) against the CPU reference:
// y = x W^T with bf16 x and W (values identical on both sides), fp32 accumulation, bf16 or F32 output, at the
// test models' tiny shapes and Kimi-Linear-48B's (fused q|k|v, o_proj, lm_head) for decode and prefill M,
// with strided inputs and outputs (halves of wider buffers), and the MXFP4 refusal.
#include <cmath>
#include <utility>
#include <vector>

#include "backend/op_harness.h"

namespace rill::testing {
namespace {

// bf16 output: one rounding of an fp32 sum, ~2^-9 relative per element (~2e-3 rel-L2).
constexpr double kBf16Tol = 1e-2;
// F32 output: the same products (exact in fp32) summed in another order.
constexpr double kF32Tol = 1e-4;

struct GemmCase {
  int64_t M, N, K;
  DType out;
  bool strided_x = false, strided_out = false;
};

// A weight [N, K] on both backends with identical bf16 values and variance ~1/K, so outputs are O(1): drawn
// on the host for small matrices, filled on each backend by fill_random (bit-identical across backends, see
// elementwise_test) for large ones, where host generation would dominate the test's time.
std::pair<BackendTensor, BackendTensor> make_weight(OpHarness& h, int64_t N, int64_t K) {
  if (N * K < (int64_t(1) << 22))
    return h.put_both(h.randn(N * K, 1.0f / std::sqrt(float(K))), DType::F32, DType::BF16, {N, K});
  const float a = std::sqrt(3.0f / float(K));
  std::pair<BackendTensor, BackendTensor> w;
  for (int side = 0; side < 2; ++side) {
    backend::Backend& be = side == 0 ? h.cpu() : h.dev();
    BackendTensor& t = side == 0 ? w.first : w.second;
    auto alloc = be.allocate(size_t(N * K) * 2);
    EXPECT_TRUE(alloc.ok());
    t.alloc = std::move(alloc).value();
    t.view = TensorView::make(t.alloc.data(), DType::BF16, {N, K}, be.device());
    EXPECT_TRUE(be.fill_random(t.view, h.seed(), -a, a).ok());
  }
  return w;
}

// Runs one case on both backends with N(0,1) inputs.
void run_case(OpHarness& h, const GemmCase& c) {
  SCOPED_TRACE(::testing::Message() << "M " << c.M << " N " << c.N << " K " << c.K << " out "
                                    << dtype_name(c.out) << (c.strided_x ? " strided-x" : "")
                                    << (c.strided_out ? " strided-out" : ""));
  const int64_t xw = c.strided_x ? 2 * c.K : c.K, ow = c.strided_out ? 2 * c.N : c.N;
  const std::vector<float> x = h.randn(c.M * xw);
  auto [xc, xd] = h.put_both(x, DType::F32, DType::BF16, {c.M, xw});
  auto [wc, wd] = make_weight(h, c.N, c.K);
  BackendTensor yc = h.empty(h.cpu(), DType::F32, {c.M, ow});
  BackendTensor yd = h.empty(h.dev(), c.out, {c.M, ow});
  // The strided views take the second half of each row, so a wrong stride reads or writes the other half.
  auto view = [](const TensorView& t, int64_t width, bool strided) {
    return strided ? t.narrow(1, width, width) : t;
  };
  const backend::LinearWeight lc{wc.view}, ld{wd.view};
  ASSERT_TRUE(h.cpu().gemm({view(xc.view, c.K, c.strided_x), &lc, view(yc.view, c.N, c.strided_out)}).ok());
  const Status st = h.dev().gemm({view(xd.view, c.K, c.strided_x), &ld, view(yd.view, c.N, c.strided_out)});
  ASSERT_TRUE(st.ok()) << st.to_string();
  const std::vector<float> ref = h.get(h.cpu(), yc.view), got = h.get(h.dev(), yd.view);
  std::vector<float> ref_used, got_used;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      const size_t i = size_t(m * ow + (c.strided_out ? c.N : 0) + n);
      ref_used.push_back(ref[i]);
      got_used.push_back(got[i]);
      if (c.strided_out) {
        ASSERT_TRUE(std::isnan(got[size_t(m * ow + n)])) << "wrote outside the view at row " << m;
      }
    }
  EXPECT_LE(rel_l2(got_used, ref_used), c.out == DType::F32 ? kF32Tol : kBf16Tol);
}

class GemmTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GemmTest, TinyShapes) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (int64_t M : {1, 3, 7, 64, 300})
    for (DType out : {DType::BF16, DType::F32}) {
      run_case(h, {M, 512, 64, out});  // lm_head of the test model
      run_case(h, {M, 192, 64, out});  // fused projection
      run_case(h, {M, 64, 96, out});   // odd-ish K
      run_case(h, {M, 36, 40, out});   // widths that are not multiples of 16 bytes
    }
}

TEST_P(GemmTest, StridedOperands) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (int64_t M : {1, 7, 64})
    for (DType out : {DType::BF16, DType::F32}) {
      run_case(h, {M, 256, 64, out, true, false});
      run_case(h, {M, 256, 64, out, false, true});
      run_case(h, {M, 200, 40, out, true, true});
    }
}

TEST_P(GemmTest, KimiLinearShapes) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (int64_t M : {1, 7, 64, 300}) {
    run_case(h, {M, 12288, 2304, DType::BF16});  // fused q|k|v
    run_case(h, {M, 2304, 4096, DType::BF16});   // o_proj
  }
  run_case(h, {300, 2304, 4096, DType::F32});
  run_case(h, {64, 2048, 2304, DType::BF16, true, false});  // x is the second half of a [64, 4608] buffer
  for (int64_t M : {1, 7}) run_case(h, {M, 163840, 2304, DType::F32});  // lm_head, F32 logits
}

// The same shape twice reuses the cached plan; a different output dtype or stride builds another.
TEST_P(GemmTest, RepeatedShapesStayCorrect) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (int rep = 0; rep < 3; ++rep) {
    run_case(h, {5, 384, 128, DType::BF16});
    run_case(h, {5, 384, 128, DType::F32});
    run_case(h, {5, 384, 128, DType::BF16, true, true});
  }
}

// gemm_group: the KDA decode projections' shapes (Kimi-Linear-48B: q|k|v, f_a, b, g_a from one x, then f_b and
// g_b from two others) in one group each, against one CPU gemm per part — at decode M (one launch on CUDA), at a
// prefill M (part by part), with a strided output, and a group whose parts differ in M (part by part).
TEST_P(GemmTest, GroupsEqualTheirPartsOneByOne) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  struct Part {
    int64_t N, K;
    int x;  // which input
  };
  const std::vector<std::vector<Part>> groups = {
      {{12288, 2304, 0}, {128, 2304, 0}, {32, 2304, 0}, {128, 2304, 0}}, {{4096, 128, 1}, {4096, 128, 2}}};
  for (int64_t M : {1, 3, 4, 7, 64})
    for (const auto& parts : groups) {
      SCOPED_TRACE(::testing::Message() << "M " << M << " parts " << parts.size());
      const int64_t K0 = parts[0].K;
      std::vector<std::pair<BackendTensor, BackendTensor>> xs, ws, ys;
      for (int i = 0; i < 3; ++i) xs.push_back(h.put_both(h.randn(M * K0), DType::F32, DType::BF16, {M, K0}));
      backend::GemmGroupArgs gc, gd;
      std::vector<backend::LinearWeight> lc(parts.size()), ld(parts.size());
      for (size_t i = 0; i < parts.size(); ++i) {
        ws.push_back(make_weight(h, parts[i].N, parts[i].K));
        lc[i] = {ws[i].first.view};
        ld[i] = {ws[i].second.view};
        // The last part writes the second half of a wider buffer (a wrong stride shows up in the first half).
        const bool strided = i + 1 == parts.size();
        ys.push_back({h.empty(h.cpu(), DType::F32, {M, parts[i].N}),
                      h.empty(h.dev(), DType::BF16, {M, strided ? 2 * parts[i].N : parts[i].N})});
        const TensorView yd = strided ? ys[i].second.view.narrow(1, parts[i].N, parts[i].N) : ys[i].second.view;
        gc.parts.push_back({xs[size_t(parts[i].x)].first.view, &lc[i], ys[i].first.view});
        gd.parts.push_back({xs[size_t(parts[i].x)].second.view, &ld[i], yd});
      }
      ASSERT_TRUE(h.cpu().gemm_group(gc).ok());
      const Status st = h.dev().gemm_group(gd);
      ASSERT_TRUE(st.ok()) << st.to_string();
      for (size_t i = 0; i < parts.size(); ++i) {
        const std::vector<float> all = h.get(h.dev(), ys[i].second.view);
        const int64_t N = parts[i].N, width = ys[i].second.view.size(1);
        std::vector<float> got;
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) got.push_back(all[size_t(m * width + (width - N) + n)]);
        EXPECT_LE(rel_l2(got, h.get(h.cpu(), ys[i].first.view)), kBf16Tol) << "part " << i;
      }
    }
}

TEST_P(GemmTest, Mxfp4IsNotImplementedYet) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  BackendTensor x = h.put(h.dev(), h.randn(4 * 64), DType::BF16, {4, 64});
  BackendTensor packed = h.put(h.dev(), std::vector<float>(32 * 32, 17.0f), DType::U8, {32, 32});
  BackendTensor scales = h.put(h.dev(), std::vector<float>(32 * 2, 127.0f), DType::U8, {32, 2});
  BackendTensor y = h.empty(h.dev(), DType::BF16, {4, 32});
  const backend::LinearWeight w{packed.view, scales.view, backend::WeightFormat::Mxfp4};
  const Status st = h.dev().gemm({x.view, &w, y.view});
  EXPECT_EQ(st.code(), StatusCode::Unimplemented) << st.to_string();
}

INSTANTIATE_TEST_SUITE_P(Backends, GemmTest, ::testing::ValuesIn(tested_backends()));

}  // namespace
}  // namespace rill::testing
