// Cross-backend tests of GEMMs on FP8 weights (issue #35: src/backend/cuda/gemm/gemv.cu's Fp8Weights policy,
// and cublaslt_runner's FP8 path over row groups) against the CPU reference, which dequantizes exactly: the
// same E4M3 codes and F32 scales on both sides, bf16 x, fp32 accumulation, bf16 or F32 output; 128 x 128
// blocks, per-channel scales and 64-row blocks (stacks of narrow parts); Kimi-Linear-48B's shapes and odd
// ones with partial blocks; decode M (the GEMV) and larger M (without scratch: the GEMV over row groups; with
// scratch: the prefill path, a bf16 copy of the weight in scratch and cuBLASLt, or under fp8_gemm=native
// cuBLASLt's block-scaled FP8 matmul); groups of FP8 parts, and of FP8 and bf16 parts, in one launch.
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/op_harness.h"
#include "backend/workspace_planner.h"

namespace rill::testing {
namespace {

constexpr double kBf16Tol = 1e-2;  // one rounding of an fp32 sum
constexpr double kF32Tol = 1e-4;   // the same exact products summed in another order

struct Fp8Weight {
  BackendTensor codes, scales;
  backend::LinearWeight w;
};

// The same random FP8 weight [N, K] on `be`: codes over the finite E4M3 values, scales ~ 1 / (16 sqrt K) so
// the outputs stay O(1).
std::pair<Fp8Weight, Fp8Weight> make_fp8(OpHarness& h, int64_t N, int64_t K, backend::Fp8Blocks b) {
  std::vector<uint8_t> codes(size_t(N * K));
  std::uniform_int_distribution<int> code(0, 254);
  for (auto& c : codes) {
    c = uint8_t(code(h.rng()));
    if (c == 0x7f) c = 0x7e;  // no NaN code (0x7f; 0xff is out of the range)
  }
  const int64_t sr = b.scale_rows(N), sc = b.scale_cols(K);
  const std::vector<float> scales = h.uniform(sr * sc, 0.5f / (16 * std::sqrt(float(K))),
                                              1.5f / (16 * std::sqrt(float(K))), false);
  std::pair<Fp8Weight, Fp8Weight> out;
  for (int side = 0; side < 2; ++side) {
    backend::Backend& be = side == 0 ? h.cpu() : h.dev();
    Fp8Weight& f = side == 0 ? out.first : out.second;
    auto a = be.allocate(codes.size());
    EXPECT_TRUE(a.ok());
    f.codes.alloc = std::move(a).value();
    f.codes.view = TensorView::make(f.codes.alloc.data(), DType::F8E4M3, {N, K}, be.device());
    EXPECT_TRUE(be.copy_to_device(f.codes.alloc.data(), codes.data(), codes.size()).ok());
    f.scales = h.put(be, scales, DType::F32, {sr, sc});
    f.w = backend::LinearWeight{f.codes.view, f.scales.view, backend::WeightFormat::Fp8, b};
  }
  return out;
}

void run_case(OpHarness& h, int64_t M, int64_t N, int64_t K, backend::Fp8Blocks b, DType out) {
  SCOPED_TRACE(::testing::Message() << "M " << M << " N " << N << " K " << K << " blocks " << b.rows << " x "
                                    << b.cols << " out " << dtype_name(out));
  auto [xc, xd] = h.put_both(h.randn(M * K), DType::F32, DType::BF16, {M, K});
  auto [wc, wd] = make_fp8(h, N, K, b);
  BackendTensor yc = h.empty(h.cpu(), DType::F32, {M, N}), yd = h.empty(h.dev(), out, {M, N});
  ASSERT_TRUE(h.cpu().gemm({xc.view, &wc.w, yc.view}).ok());
  const Status st = h.dev().gemm({xd.view, &wd.w, yd.view});
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_LE(rel_l2(h.get(h.dev(), yd.view), h.get(h.cpu(), yc.view)), out == DType::F32 ? kF32Tol : kBf16Tol);
}

const backend::Fp8Blocks kBlocks[] = {{128, 128}, {1, backend::Fp8Blocks::kWholeRow}, {64, 128}};

class Fp8GemmTest : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8GemmTest, OddShapesWithPartialBlocks) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (const auto& b : kBlocks)
    for (int64_t M : {1, 2, 3, 4, 7, 64})
      for (DType out : {DType::BF16, DType::F32}) {
        run_case(h, M, 200, 136, b, out);
        run_case(h, M, 33, 264, b, out);
        run_case(h, M, 512, 64, b, out);
      }
}

TEST_P(Fp8GemmTest, KimiLinear48bShapes) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  // Fused q|k|v [3 x 4096, 2304], MLA q_proj [32 x 192, 2304], o_proj [2304, 4096], kv_a [576, 2304] (a partial
  // block row), dense MLP down [2304, 9216].
  for (int64_t M : {1, 4, 9})
    for (auto [N, K] : {std::pair<int64_t, int64_t>{12288, 2304}, {6144, 2304}, {2304, 4096}, {576, 2304},
                        {2304, 9216}})
      run_case(h, M, N, K, {128, 128}, DType::BF16);
}

TEST_P(Fp8GemmTest, GroupsEqualTheirPartsOneByOne) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  const int64_t M = 2, K = 256;
  auto [xc, xd] = h.put_both(h.randn(M * K), DType::F32, DType::BF16, {M, K});
  auto [w1c, w1d] = make_fp8(h, 384, K, {128, 128});
  auto [w2c, w2d] = make_fp8(h, 40, K, {1, backend::Fp8Blocks::kWholeRow});
  BackendTensor y1c = h.empty(h.cpu(), DType::F32, {M, 384}), y2c = h.empty(h.cpu(), DType::F32, {M, 40});
  BackendTensor y1d = h.empty(h.dev(), DType::BF16, {M, 384}), y2d = h.empty(h.dev(), DType::BF16, {M, 40});
  ASSERT_TRUE(h.cpu().gemm({xc.view, &w1c.w, y1c.view}).ok());
  ASSERT_TRUE(h.cpu().gemm({xc.view, &w2c.w, y2c.view}).ok());
  backend::GemmGroupArgs g;
  g.parts = {{xd.view, &w1d.w, y1d.view}, {xd.view, &w2d.w, y2d.view}};
  const Status st = h.dev().gemm_group(g);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_LE(rel_l2(h.get(h.dev(), y1d.view), h.get(h.cpu(), y1c.view)), kBf16Tol);
  EXPECT_LE(rel_l2(h.get(h.dev(), y2d.view), h.get(h.cpu(), y2c.view)), kBf16Tol);
}

// A group of FP8 and bf16 parts (`--quantization` keeps the 48B's KDA gate projections bf16 beside the FP8
// q|k|v; on CUDA one GEMV launch reads each part with its own policy): every part as the CPU computes it
// alone.
TEST_P(Fp8GemmTest, GroupsMixingFp8AndBf16Parts) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  const int64_t K = 2304;
  for (int64_t M : {1, 3, 4}) {
    SCOPED_TRACE(::testing::Message() << "M " << M);
    auto [xc, xd] = h.put_both(h.randn(M * K), DType::F32, DType::BF16, {M, K});
    auto [w0c, w0d] = make_fp8(h, 384, K, {1, backend::Fp8Blocks::kWholeRow});
    auto [w2c, w2d] = make_fp8(h, 256, K, {128, 128});
    auto [b1c, b1d] =
        h.put_both(h.randn(40 * K, 1.0f / std::sqrt(float(K))), DType::F32, DType::BF16, {40, K});
    auto [b3c, b3d] =
        h.put_both(h.randn(128 * K, 1.0f / std::sqrt(float(K))), DType::F32, DType::BF16, {128, K});
    const backend::LinearWeight l1c{b1c.view}, l1d{b1d.view}, l3c{b3c.view}, l3d{b3d.view};
    const backend::LinearWeight* wc[] = {&w0c.w, &l1c, &w2c.w, &l3c};
    const backend::LinearWeight* wd[] = {&w0d.w, &l1d, &w2d.w, &l3d};
    const int64_t Ns[] = {384, 40, 256, 128};
    std::vector<BackendTensor> yc, yd;
    backend::GemmGroupArgs g;
    for (int i = 0; i < 4; ++i) {
      yc.push_back(h.empty(h.cpu(), DType::F32, {M, Ns[i]}));
      yd.push_back(h.empty(h.dev(), DType::BF16, {M, Ns[i]}));
    }
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(h.cpu().gemm({xc.view, wc[i], yc[size_t(i)].view}).ok());
      g.parts.push_back({xd.view, wd[i], yd[size_t(i)].view});
    }
    const Status st = h.dev().gemm_group(g);
    ASSERT_TRUE(st.ok()) << st.to_string();
    for (int i = 0; i < 4; ++i)
      EXPECT_LE(rel_l2(h.get(h.dev(), yd[size_t(i)].view), h.get(h.cpu(), yc[size_t(i)].view)), kBf16Tol)
          << "part " << i;
  }
}

// The prefill path (M > 16 with a scratch arena): the weight dequantised to a bf16 copy in scratch, then the
// bf16 GEMM. The copy rounds each weight once to bf16, so F32 outputs get the bf16 tolerance too. Scratch
// comes from planning the op, as the model reserves it.
void run_prefill_case(OpHarness& h, int64_t M, int64_t N, int64_t K, backend::Fp8Blocks b, DType out,
                      double tol = kBf16Tol) {
  SCOPED_TRACE(::testing::Message() << "prefill M " << M << " N " << N << " K " << K << " blocks " << b.rows
                                    << " x " << b.cols << " out " << dtype_name(out));
  auto [xc, xd] = h.put_both(h.randn(M * K), DType::F32, DType::BF16, {M, K});
  auto [wc, wd] = make_fp8(h, N, K, b);
  BackendTensor yc = h.empty(h.cpu(), DType::F32, {M, N}), yd = h.empty(h.dev(), out, {M, N});
  ASSERT_TRUE(h.cpu().gemm({xc.view, &wc.w, yc.view}).ok());
  Arena measure(nullptr, 0, h.dev().device());
  ASSERT_TRUE(backend::WorkspacePlanner(h.dev()).gemm({xd.view, &wd.w, yd.view, &measure}).ok());
  if (M > 16) {  // CUDA's kFp8GemvMaxRows: fewer rows take the FP8 GEMV in groups of 4
    EXPECT_GE(measure.high_water(), size_t(2 * N * K));  // the bf16 copy at least
  }
  auto mem = h.dev().allocate(measure.high_water() + 256);
  ASSERT_TRUE(mem.ok());
  backend::DeviceAllocation scratch_mem = std::move(mem).value();
  Arena arena(scratch_mem.data(), scratch_mem.size(), h.dev().device());
  const Status st = h.dev().gemm({xd.view, &wd.w, yd.view, &arena});
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(arena.used(), 0u);  // given back
  EXPECT_LE(rel_l2(h.get(h.dev(), yd.view), h.get(h.cpu(), yc.view)), tol);
}

TEST_P(Fp8GemmTest, PrefillOddShapes) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (const auto& b : kBlocks)
    for (int64_t M : {4, 5, 16, 17, 37, 300})
      for (DType out : {DType::BF16, DType::F32}) {
        run_prefill_case(h, M, 200, 136, b, out);
        run_prefill_case(h, M, 33, 264, b, out);
        run_prefill_case(h, M, 512, 64, b, out);
      }
  run_prefill_case(h, 8192, 136, 256, {128, 128}, DType::BF16);
  run_prefill_case(h, 8192, 64, 200, {1, backend::Fp8Blocks::kWholeRow}, DType::BF16);
  run_prefill_case(h, 41, 96, 130, {128, 128}, DType::BF16);  // K % 8 != 0: the scalar dequant
}

TEST_P(Fp8GemmTest, PrefillKimiLinear48bShapes) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  // Fused q|k|v [3 x 4096, 2304], o_proj [2304, 4096], the shared expert's gate|up [2 x 1024, 2304] and down
  // [2304, 1024], dense MLP down [2304, 9216].
  for (int64_t M : {5, 37, 300})
    for (auto [N, K] :
         {std::pair<int64_t, int64_t>{12288, 2304}, {2304, 4096}, {2048, 2304}, {2304, 1024}, {2304, 9216}})
      run_prefill_case(h, M, N, K, {128, 128}, DType::BF16);
  run_prefill_case(h, 37, 12288, 2304, {1, backend::Fp8Blocks::kWholeRow}, DType::BF16);
  run_prefill_case(h, 2048, 2304, 1024, {128, 128}, DType::BF16);
}

// The native FP8 path (backend option fp8_gemm=native; 128 x 128 weight blocks, K % 128 == 0, N % 16 == 0):
// activations quantised to E4M3 per token and 128 columns (3 mantissa bits: ~2-3% relative error per element,
// hence the looser bound). Other shapes under the option take the bf16 copy (checked at its own bound).
constexpr double kNativeTol = 5e-2;

TEST_P(Fp8GemmTest, PrefillNativeFp8) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  ASSERT_TRUE(h.dev().set_option("fp8_gemm", "native").ok());
  for (int64_t M : {5, 37, 300})
    for (auto [N, K] :
         {std::pair<int64_t, int64_t>{12288, 2304}, {2304, 4096}, {2048, 2304}, {2304, 1024}, {2304, 9216}})
      run_prefill_case(h, M, N, K, {128, 128}, DType::BF16, kNativeTol);
  run_prefill_case(h, 2048, 2304, 1024, {128, 128}, DType::BF16, kNativeTol);
  run_prefill_case(h, 64, 200, 256, {128, 128}, DType::BF16);  // N % 16: the copy
  run_prefill_case(h, 64, 256, 136, {128, 128}, DType::BF16);  // K % 128: the copy
  run_prefill_case(h, 64, 256, 256, {1, backend::Fp8Blocks::kWholeRow},
                   DType::BF16);                              // per channel: the copy
  run_prefill_case(h, 64, 256, 256, {128, 128}, DType::F32);  // F32 out: the copy
  ASSERT_TRUE(h.dev().set_option("fp8_gemm", "dequant").ok());
  EXPECT_FALSE(h.dev().set_option("fp8_gemm", "fast").ok());
}

INSTANTIATE_TEST_SUITE_P(Backends, Fp8GemmTest, ::testing::ValuesIn(tested_backends()));

}  // namespace
}  // namespace rill::testing
