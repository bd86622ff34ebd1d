// Cross-backend tests on MXFP4-packed weights (K3's routed experts, weight-only) against the CPU reference,
// whose dequantisation is checked bit for bit in tests/backend/cpu/mxfp4_test.cc.
// gemm: the CUDA weight-only GEMM is a later step: while the backend answers Unimplemented the case skips.
// moe_experts: the decode path (T*k <= 64, the gathered MXFP4 GEMVs) and the grouped path (T*k > 64, the
// MXFP4 grouped GEMMs) at tiny and K3 shapes, SiLU and SiTU, with uniform and skewed routing (experts
// without tokens, one expert with several 64-slot tiles); both must run (no skip).
#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "backend/op_harness.h"
#include "backend/workspace_planner.h"
#include "test_backend_options.h"

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

// ------------------------------------------------------------------------------------ moe_experts, MXFP4

// Experts: CUDA rounds gate/up, the activation and each expert's output to bf16; the CPU keeps fp32 (as
// tests/backend/moe_test.cc).
constexpr double kExpertsTol = 1e-2;

// Stacked MXFP4 experts with identical bytes on both backends (fill_random on U8 is bit-identical).
struct Mxfp4Experts {
  BackendTensor c[4], d[4];  // gate_up, gate_up_scales, down, down_scales
  backend::ExpertWeights cpu, dev;
};

std::unique_ptr<Mxfp4Experts> make_mxfp4_experts(OpHarness& h, int64_t E, int64_t Hx, int64_t I) {
  auto ex = std::make_unique<Mxfp4Experts>();
  const Shape shapes[4] = {{E, 2 * I, Hx / 2}, {E, 2 * I, Hx / 32}, {E, Hx, I / 2}, {E, Hx, I / 32}};
  auto fill = [&](backend::Backend& be, BackendTensor& t, const Shape& s, float lo, float hi, uint64_t seed) {
    auto m = be.allocate(size_t(s.numel()));
    ASSERT_TRUE(m.ok());
    t.alloc = std::move(m).value();
    t.view = TensorView::make(t.alloc.data(), DType::U8, s, be.device());
    ASSERT_TRUE(be.fill_random(t.view, seed, lo, hi).ok());
  };
  for (int i = 0; i < 4; ++i) {
    // Codes: any byte (both nibbles, both signs); scales 2^-13 .. 2^-6 as in the GEMM case.
    const float lo = i % 2 ? 114.0f : 0.0f, hi = i % 2 ? 121.0f : 255.0f;
    fill(h.cpu(), ex->c[i], shapes[i], lo, hi, h.seed() + 11 + uint64_t(i));
    fill(h.dev(), ex->d[i], shapes[i], lo, hi, h.seed() + 11 + uint64_t(i));
  }
  auto set = [](backend::ExpertWeights& w, BackendTensor (&t)[4]) {
    w.gate_up = t[0].view;
    w.gate_up_scales = t[1].view;
    w.down = t[2].view;
    w.down_scales = t[3].view;
    w.format = backend::WeightFormat::Mxfp4;
  };
  set(ex->cpu, ex->c);
  set(ex->dev, ex->d);
  return ex;
}

// Uniform: k distinct random experts per token. Skewed: expert 0 in every token (ceil(T / 64) tiles of it),
// the others from experts [1, E - 2), so experts E - 2 and E - 1 get no tokens (needs k <= E - 2).
enum class Routing { Uniform, Skewed };

void run_mxfp4_experts(OpHarness& h, const Mxfp4Experts& ex, int64_t T, int k,
                       backend::Activation act = backend::Activation::Silu,
                       Routing routing = Routing::Uniform) {
  const int64_t E = ex.cpu.n_experts(), Hx = ex.cpu.width();
  const bool skewed = routing == Routing::Skewed;
  SCOPED_TRACE(::testing::Message() << "T " << T << " Hx " << Hx << " I " << ex.cpu.intermediate() << " E "
                                    << E << " k " << k
                                    << (act == backend::Activation::Situ ? " situ" : " silu")
                                    << (skewed ? " skewed" : ""));
  ASSERT_TRUE(!skewed || k <= E - 2);
  // Distinct experts per token, as the router gives; weights as after renormalisation and scaling.
  std::vector<float> ids, w;
  std::vector<int> perm(static_cast<size_t>(skewed ? E - 3 : E));
  std::iota(perm.begin(), perm.end(), skewed ? 1 : 0);
  std::uniform_real_distribution<float> wd(0.05f, 0.6f);
  for (int64_t t = 0; t < T; ++t) {
    std::shuffle(perm.begin(), perm.end(), h.rng());
    for (int j = 0; j < k; ++j) {
      ids.push_back(skewed ? (j == 0 ? 0.0f : float(perm[size_t(j - 1)])) : float(perm[size_t(j)]));
      w.push_back(wd(h.rng()));
    }
  }
  auto [xc, xd] = h.put_both(h.randn(T * Hx), DType::F32, DType::BF16, {T, Hx});
  BackendTensor ic = h.put(h.cpu(), ids, DType::I32, {T, k}), id = h.put(h.dev(), ids, DType::I32, {T, k});
  BackendTensor gc = h.put(h.cpu(), w, DType::F32, {T, k}), gd = h.put(h.dev(), w, DType::F32, {T, k});
  BackendTensor yc = h.empty(h.cpu(), DType::F32, {T, Hx}), yd = h.empty(h.dev(), DType::BF16, {T, Hx});
  const float beta = act == backend::Activation::Situ ? 4.0f : 0.0f;
  const float lbeta = act == backend::Activation::Situ ? 25.0f : 0.0f;
  ASSERT_TRUE(h.cpu().moe_experts({xc.view, ic.view, gc.view, &ex.cpu, act, beta, lbeta, yc.view, nullptr}).ok());
  backend::MoeExpertsArgs a{xd.view, id.view, gd.view, &ex.dev, act, beta, lbeta, yd.view, nullptr};
  // Scratch from planning the op, as the model reserves it.
  Arena measure(nullptr, 0, Device::Cuda);
  a.scratch = &measure;
  ASSERT_TRUE(backend::WorkspacePlanner(h.dev()).moe_experts(a).ok());
  auto mem = h.dev().allocate(measure.high_water() + 256);
  ASSERT_TRUE(mem.ok());
  backend::DeviceAllocation scratch_mem = std::move(mem).value();
  Arena arena(scratch_mem.data(), scratch_mem.size(), Device::Cuda);
  a.scratch = &arena;
  const Status st = h.dev().moe_experts(a);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(arena.used(), 0u) << "moe_experts must give its scratch back";
  EXPECT_LE(rel_l2(h.get(h.dev(), yd.view), h.get(h.cpu(), yc.view)), kExpertsTol);
}

TEST_P(Mxfp4Test, ExpertsDecodeTiny) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  auto ex = make_mxfp4_experts(h, 8, 64, 32);
  for (int64_t T : {1, 2, 3, 4}) run_mxfp4_experts(h, *ex, T, 2);
  run_mxfp4_experts(h, *ex, 3, 2, backend::Activation::Situ);
  auto ex2 = make_mxfp4_experts(h, 6, 96, 64);  // 3 and 2 scale groups per row: partial lane steps
  run_mxfp4_experts(h, *ex2, 4, 3);
  // More than 64 pairs but at most a quarter of the experts (K3 decode batches): the GEMVs too.
  auto ex3 = make_mxfp4_experts(h, 320, 64, 32);
  run_mxfp4_experts(h, *ex3, 20, 4, backend::Activation::Situ);
}

// K3's routed experts (latent width 3584, I = 3072, top-16, SiTU) on fewer experts: 16, 32 and 64 pairs.
TEST_P(Mxfp4Test, ExpertsDecodeK3Shapes) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  auto ex = make_mxfp4_experts(h, 20, 3584, 3072);
  for (int64_t T : {1, 2, 4}) run_mxfp4_experts(h, *ex, T, 16, backend::Activation::Situ);
  run_mxfp4_experts(h, *ex, 1, 16, backend::Activation::Silu);
}

// The grouped path (> 64 pairs) on small experts: one and several k-tiles (Hx 32, 64, 96; I 32, 64), column
// tails in both GEMMs (I < 64 gate_up columns, Hx < 128 down columns), token counts that are not multiples
// of the 64-slot tile.
TEST_P(Mxfp4Test, ExpertsGroupedTiny) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  auto ex = make_mxfp4_experts(h, 16, 64, 32);
  for (int64_t T : {17, 100}) {  // 68 and 400 pairs
    run_mxfp4_experts(h, *ex, T, 4);
    run_mxfp4_experts(h, *ex, T, 4, backend::Activation::Situ);
  }
  run_mxfp4_experts(h, *ex, 100, 4, backend::Activation::Silu, Routing::Skewed);
  run_mxfp4_experts(h, *ex, 100, 4, backend::Activation::Situ, Routing::Skewed);
  auto ex2 = make_mxfp4_experts(h, 6, 96, 64);  // 3 k-tiles in gate_up, 2 in down
  run_mxfp4_experts(h, *ex2, 50, 3);
  auto ex3 = make_mxfp4_experts(h, 8, 32, 32);  // a single k-tile in both GEMMs
  run_mxfp4_experts(h, *ex3, 33, 2, backend::Activation::Situ);
}

// Many slots per expert and tails everywhere: I = 160 (gate_up: 3 column tiles, the last partial; down: 5
// k-tiles), Hx = 224 (down: 2 column tiles, the last partial; gate_up: 7 k-tiles), 300 tokens (expert 0 of
// the skewed routing has 300 slots: 5 tiles, the last with 44).
TEST_P(Mxfp4Test, ExpertsGroupedManyTokens) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  auto ex = make_mxfp4_experts(h, 8, 224, 160);
  run_mxfp4_experts(h, *ex, 300, 2, backend::Activation::Silu, Routing::Skewed);
  run_mxfp4_experts(h, *ex, 300, 4, backend::Activation::Situ, Routing::Skewed);
  run_mxfp4_experts(h, *ex, 130, 3, backend::Activation::Situ);
}

// K3's routed experts (latent width 3584, I = 3072, top-16, SiTU) on 20 experts: 80 and 192 pairs.
TEST_P(Mxfp4Test, ExpertsGroupedK3Shapes) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  auto ex = make_mxfp4_experts(h, 20, 3584, 3072);
  run_mxfp4_experts(h, *ex, 5, 16, backend::Activation::Situ);
  run_mxfp4_experts(h, *ex, 12, 16, backend::Activation::Situ, Routing::Skewed);
  run_mxfp4_experts(h, *ex, 5, 16, backend::Activation::Silu);
}

// The grouped path on the Hopper kernel's MXFP4 policy (option moe_wgmma_mxfp4, here at every step size:
// moe_wgmma_mxfp4_min_pairs 0; codes by TMA, dequantised to bf16 in shared memory, wgmma; skipped where the
// device cannot run it; the other MXFP4 tests' steps lie below the default threshold or have widths it does
// not take, so they keep the mma.sync GEMM): K3's experts at 192 and 640 pairs,
// partial column tiles in both GEMMs (I = 192: gate_up's second tile half empty; Hx = 384: down's second tile
// without its second box), one k step in down (I = 64), experts with several tiles and experts with none.
TEST_P(Mxfp4Test, ExpertsGroupedWgmma) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  const Status on = h.dev().set_option("moe_wgmma_mxfp4", "1");
  if (!on.ok()) GTEST_SKIP() << "no moe_wgmma_mxfp4 path here: " << on.to_string();
  ASSERT_TRUE(h.dev().set_option("moe_wgmma_mxfp4_min_pairs", "0").ok());
  auto k3 = make_mxfp4_experts(h, 20, 3584, 3072);
  run_mxfp4_experts(h, *k3, 12, 16, backend::Activation::Situ, Routing::Skewed);
  run_mxfp4_experts(h, *k3, 40, 16, backend::Activation::Situ);
  auto tails = make_mxfp4_experts(h, 8, 384, 192);
  run_mxfp4_experts(h, *tails, 300, 2, backend::Activation::Silu, Routing::Skewed);  // expert 0: 3 tiles
  run_mxfp4_experts(h, *tails, 130, 3, backend::Activation::Situ);
  auto small = make_mxfp4_experts(h, 16, 128, 64);
  run_mxfp4_experts(h, *small, 100, 4, backend::Activation::Silu);
  run_mxfp4_experts(h, *small, 100, 4, backend::Activation::Situ, Routing::Skewed);
  ASSERT_TRUE(h.dev().set_option("moe_wgmma_mxfp4", cuda_backend_options().moe_wgmma_mxfp4 ? "1" : "0").ok());
  ASSERT_TRUE(h.dev()
                  .set_option("moe_wgmma_mxfp4_min_pairs",
                              std::to_string(cuda_backend_options().moe_wgmma_mxfp4_min_pairs))
                  .ok());
}

INSTANTIATE_TEST_SUITE_P(Backends, Mxfp4Test, ::testing::ValuesIn(tested_backends()));

}  // namespace
}  // namespace rill::testing
