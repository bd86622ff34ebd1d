// Cross-backend tests of moe_experts on FP8 experts (issue #35: src/backend/cuda/moe/experts.cu's Fp8Rows
// policy of the decode GEMVs, and the grouped GEMM's Fp8Tile policy for steps of more than 64 pairs whose
// widths are multiples of 32; other shapes stay on the GEMVs at any T) against the CPU, which dequantizes
// exactly: identical E4M3 codes and F32 block scales on both backends (fill_random is bit-identical across
// backends), 128 x 128 blocks, per-channel scales and 64-row blocks (64-wide experts), Kimi-Linear-48B's
// expert shape, decode and prefill-sized T; an FP8 shared expert beside them (fused into CUDA's decode GEMVs
// for one or two tokens, separate ops otherwise and on the CPU).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/op_harness.h"
#include "test_backend_options.h"
#include "backend/workspace_planner.h"

namespace rill::testing {
namespace {

constexpr double kExpertsTol = 1e-2;  // CUDA rounds gate/up, the activation and each expert's output to bf16

struct Fp8Experts {
  BackendTensor c[4], d[4];  // gate_up, gate_up_scales, down, down_scales
  backend::ExpertWeights cpu, dev;
};

std::unique_ptr<Fp8Experts> make_fp8_experts(OpHarness& h, int64_t E, int64_t Hx, int64_t I,
                                             backend::Fp8Blocks b) {
  auto ex = std::make_unique<Fp8Experts>();
  const Shape shapes[4] = {{E, 2 * I, Hx},
                           {E, b.scale_rows(2 * I), b.scale_cols(Hx)},
                           {E, Hx, I},
                           {E, b.scale_rows(Hx), b.scale_cols(I)}};
  auto fill = [&](backend::Backend& be, BackendTensor& t, int i, uint64_t seed) {
    const bool scales = i % 2 == 1;
    auto m = be.allocate(size_t(shapes[i].numel()) * (scales ? 4 : 1));
    ASSERT_TRUE(m.ok());
    t.alloc = std::move(m).value();
    // Codes over the non-negative finite E4M3 values (no NaN byte); signs and size from the scales, as the
    // dummy weights: |w| ~ 1 / sqrt(fan-in).
    const TensorView u8 = TensorView::make(t.alloc.data(), DType::U8, shapes[i], be.device());
    const float c = 1.0f / (100.0f * std::sqrt(float(i < 2 ? Hx : I)));
    const TensorView f = TensorView::make(t.alloc.data(), DType::F32, shapes[i], be.device());
    ASSERT_TRUE((scales ? be.fill_random(f, seed, -c, c) : be.fill_random(u8, seed, 0.0f, 126.0f)).ok());
    t.view = scales ? f : TensorView::make(t.alloc.data(), DType::F8E4M3, shapes[i], be.device());
  };
  for (int i = 0; i < 4; ++i) {
    fill(h.cpu(), ex->c[i], i, h.seed() + 21 + uint64_t(i));
    fill(h.dev(), ex->d[i], i, h.seed() + 21 + uint64_t(i));
  }
  auto set = [&](backend::ExpertWeights& w, BackendTensor(&t)[4]) {
    w.gate_up = t[0].view;
    w.gate_up_scales = t[1].view;
    w.down = t[2].view;
    w.down_scales = t[3].view;
    w.format = backend::WeightFormat::Fp8;
    w.block = b;
  };
  set(ex->cpu, ex->c);
  set(ex->dev, ex->d);
  return ex;
}

// A shared expert in FP8 (gate_up [2 Is, Hx], down [Hx, Is], the experts' blocks), the same codes and scales
// on both backends.
struct Fp8Shared {
  BackendTensor c[4], d[4];  // gate_up, its scales, down, its scales
  backend::LinearWeight gu_cpu, dn_cpu, gu_dev, dn_dev;
};

std::unique_ptr<Fp8Shared> make_fp8_shared(OpHarness& h, int64_t Hx, int64_t Is, backend::Fp8Blocks b) {
  auto sh = std::make_unique<Fp8Shared>();
  const Shape shapes[4] = {
      {2 * Is, Hx}, {b.scale_rows(2 * Is), b.scale_cols(Hx)}, {Hx, Is}, {b.scale_rows(Hx), b.scale_cols(Is)}};
  auto fill = [&](backend::Backend& be, BackendTensor& t, int i, uint64_t seed) {
    const bool scales = i % 2 == 1;
    auto m = be.allocate(size_t(shapes[i].numel()) * (scales ? 4 : 1));
    ASSERT_TRUE(m.ok());
    t.alloc = std::move(m).value();
    const float c = 1.0f / (100.0f * std::sqrt(float(i < 2 ? Hx : Is)));
    const TensorView f = TensorView::make(t.alloc.data(), DType::F32, shapes[i], be.device());
    const TensorView u8 = TensorView::make(t.alloc.data(), DType::U8, shapes[i], be.device());
    ASSERT_TRUE((scales ? be.fill_random(f, seed, -c, c) : be.fill_random(u8, seed, 0.0f, 126.0f)).ok());
    t.view = scales ? f : TensorView::make(t.alloc.data(), DType::F8E4M3, shapes[i], be.device());
  };
  for (int i = 0; i < 4; ++i) {
    fill(h.cpu(), sh->c[i], i, h.seed() + 41 + uint64_t(i));
    fill(h.dev(), sh->d[i], i, h.seed() + 41 + uint64_t(i));
  }
  auto set = [&](backend::LinearWeight& w, const BackendTensor& codes, const BackendTensor& scales) {
    w.weight = codes.view;
    w.scales = scales.view;
    w.format = backend::WeightFormat::Fp8;
    w.block = b;
  };
  set(sh->gu_cpu, sh->c[0], sh->c[1]);
  set(sh->dn_cpu, sh->c[2], sh->c[3]);
  set(sh->gu_dev, sh->d[0], sh->d[1]);
  set(sh->dn_dev, sh->d[2], sh->d[3]);
  return sh;
}

// Skewed routing (skewed = true, moe_test.cc's rule): every token's first expert is 0 (T slots, several
// tiles), its second one of 1-3, the rest drawn from [4, E/2); token 0's last expert is E - 1 (one slot) and
// experts [E/2, E - 1) get none. Needs 3 <= k <= E/2 - 2.
void run_fp8_experts(OpHarness& h, const Fp8Experts& ex, int64_t T, int k,
                     backend::Activation act = backend::Activation::Silu, int64_t Is = 0, bool skewed = false,
                     double tol = kExpertsTol) {
  const int64_t E = ex.cpu.n_experts(), Hx = ex.cpu.width();
  SCOPED_TRACE(::testing::Message() << "T " << T << " Hx " << Hx << " I " << ex.cpu.intermediate() << " E "
                                    << E << " k " << k << " blocks " << ex.cpu.block.rows << " x "
                                    << ex.cpu.block.cols << " shared " << Is << (skewed ? " skewed" : ""));
  std::vector<float> ids, w;
  std::vector<int> perm(static_cast<size_t>(E));
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<int> tail(skewed ? size_t(E / 2 - 4) : 0);
  std::iota(tail.begin(), tail.end(), 4);
  if (skewed) {
    ASSERT_TRUE(k >= 3 && k - 2 <= int(tail.size())) << "skewed routing needs 3 <= k <= E/2 - 2";
  }
  std::uniform_real_distribution<float> wd(0.05f, 0.6f);
  for (int64_t t = 0; t < T; ++t) {
    if (skewed) {
      std::shuffle(tail.begin(), tail.end(), h.rng());
      perm[0] = 0;
      perm[1] = 1 + int(t % 3);
      for (int j = 2; j < k; ++j) perm[size_t(j)] = tail[size_t(j - 2)];
      if (t == 0) perm[size_t(k - 1)] = int(E - 1);
    } else {
      std::shuffle(perm.begin(), perm.end(), h.rng());
    }
    for (int j = 0; j < k; ++j) {
      ids.push_back(float(perm[size_t(j)]));
      w.push_back(wd(h.rng()));
    }
  }
  auto [xc, xd] = h.put_both(h.randn(T * Hx), DType::F32, DType::BF16, {T, Hx});
  BackendTensor ic = h.put(h.cpu(), ids, DType::I32, {T, k}), id = h.put(h.dev(), ids, DType::I32, {T, k});
  BackendTensor gc = h.put(h.cpu(), w, DType::F32, {T, k}), gd = h.put(h.dev(), w, DType::F32, {T, k});
  BackendTensor yc = h.empty(h.cpu(), DType::F32, {T, Hx}), yd = h.empty(h.dev(), DType::BF16, {T, Hx});
  const float beta = act == backend::Activation::Situ ? 4.0f : 0.0f;
  const float lbeta = act == backend::Activation::Situ ? 25.0f : 0.0f;
  backend::MoeExpertsArgs ca{xc.view, ic.view, gc.view, &ex.cpu, act, beta, lbeta, yc.view, nullptr};
  backend::MoeExpertsArgs a{xd.view, id.view, gd.view, &ex.dev, act, beta, lbeta, yd.view, nullptr};
  std::unique_ptr<Fp8Shared> sh;
  std::vector<char> cpu_scratch;
  Arena cpu_arena;
  if (Is > 0) {  // the CPU runs the shared expert as separate ops in its scratch (fp32: 4 bytes a value)
    sh = make_fp8_shared(h, Hx, Is, ex.cpu.block);
    ca.shared_gate_up = &sh->gu_cpu;
    ca.shared_down = &sh->dn_cpu;
    a.shared_gate_up = &sh->gu_dev;
    a.shared_down = &sh->dn_dev;
    cpu_scratch.resize(size_t(T * (3 * Is + Hx)) * 4 + 4096);
    cpu_arena = Arena(cpu_scratch.data(), cpu_scratch.size(), Device::Cpu);
    ca.scratch = &cpu_arena;
  }
  const Status cst = h.cpu().moe_experts(ca);
  ASSERT_TRUE(cst.ok()) << cst.to_string();
  Arena measure(nullptr, 0, Device::Cuda);  // scratch from planning the op, as the model reserves it
  a.scratch = &measure;
  ASSERT_TRUE(backend::WorkspacePlanner(h.dev()).moe_experts(a).ok());
  auto mem = h.dev().allocate(measure.high_water() + 256);
  ASSERT_TRUE(mem.ok());
  backend::DeviceAllocation scratch_mem = std::move(mem).value();
  Arena arena(scratch_mem.data(), scratch_mem.size(), Device::Cuda);
  a.scratch = &arena;
  const Status st = h.dev().moe_experts(a);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_LE(rel_l2(h.get(h.dev(), yd.view), h.get(h.cpu(), yc.view)), tol);
}

class Fp8ExpertsTest : public ::testing::TestWithParam<std::string> {};

// Pins moe_wgmma_fp8 for a test's scope where the backend has the option (CUDA; on by default there), and
// restores this run's value after: the tests of the dequantising grouped GEMM run it at its own bound even where
// the Hopper FP8 kernels would take the shape.
class Fp8WgmmaSetting {
 public:
  Fp8WgmmaSetting(backend::Backend& be, bool on)
      : be_(be), status_(be.set_option("moe_wgmma_fp8", on ? "1" : "0")) {}
  ~Fp8WgmmaSetting() {
    if (status_.ok()) (void)be_.set_option("moe_wgmma_fp8", cuda_backend_options().moe_wgmma_fp8 ? "1" : "0");
  }
  Fp8WgmmaSetting(const Fp8WgmmaSetting&) = delete;
  Fp8WgmmaSetting& operator=(const Fp8WgmmaSetting&) = delete;
  const Status& status() const { return status_; }

 private:
  backend::Backend& be_;
  Status status_;
};

TEST_P(Fp8ExpertsTest, DecodeAndPrefillSizedSteps) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  const Fp8WgmmaSetting dequantising(h.dev(), false);
  auto a = make_fp8_experts(h, 8, 256, 128, {128, 128});
  for (int64_t T : {1, 2, 3, 4, 40}) run_fp8_experts(h, *a, T, 2);
  run_fp8_experts(h, *a, 3, 2, backend::Activation::Situ);
  auto b = make_fp8_experts(h, 6, 136, 64, {64, 128});  // the demo's 64-wide experts; Hx with a partial block
  for (int64_t T : {1, 4, 100}) run_fp8_experts(h, *b, T, 3);
  auto c = make_fp8_experts(h, 8, 96, 40, {1, backend::Fp8Blocks::kWholeRow});  // per channel
  for (int64_t T : {1, 7}) run_fp8_experts(h, *c, T, 2);
}

TEST_P(Fp8ExpertsTest, KimiLinear48bShape) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  auto ex = make_fp8_experts(h, 16, 2304, 1024, {128, 128});  // 16 of the 256 experts: the same rows
  for (int64_t T : {1, 4}) run_fp8_experts(h, *ex, T, 8);
}

// The dequantising grouped path (> 64 pairs, Hx and I multiples of 32; moe_wgmma_fp8 off): 128 x 128 blocks with partial blocks (Hx 160),
// per-channel scales, 32-row x 64-column blocks, many experts with 0 or 1 slots (64 experts, 72 pairs), odd
// T, SiTU, and the 48B expert shape at prefill-sized T.
TEST_P(Fp8ExpertsTest, GroupedPath) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  const Fp8WgmmaSetting dequantising(h.dev(), false);
  auto a = make_fp8_experts(h, 8, 160, 128, {128, 128});
  for (int64_t T : {33, 37, 300}) run_fp8_experts(h, *a, T, 2);
  run_fp8_experts(h, *a, 65, 2, backend::Activation::Situ);
  auto b = make_fp8_experts(h, 64, 128, 64, {32, 64});
  run_fp8_experts(h, *b, 9, 8);  // 72 pairs over 64 experts: most get 0, 1 or 2 slots
  run_fp8_experts(h, *b, 5, 16);
  auto c = make_fp8_experts(h, 8, 96, 64, {1, backend::Fp8Blocks::kWholeRow});  // per channel
  for (int64_t T : {65, 129}) run_fp8_experts(h, *c, T, 2);
}

TEST_P(Fp8ExpertsTest, KimiLinear48bShapePrefill) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  const Fp8WgmmaSetting dequantising(h.dev(), false);
  auto ex = make_fp8_experts(h, 16, 2304, 1024, {128, 128});
  for (int64_t T : {9, 100}) run_fp8_experts(h, *ex, T, 8);
  auto pc = make_fp8_experts(h, 16, 2304, 1024, {1, backend::Fp8Blocks::kWholeRow});
  run_fp8_experts(h, *pc, 37, 8);
}

// The shared expert in FP8 beside FP8 experts: 16-code loads (widths multiples of 16), 8-code loads (Hx 136,
// a partial block), per-channel scales, a shared expert wider and narrower than the routed ones, three tokens
// (not fused), and the 48B shape (k + 1 = 9 down slots).
TEST_P(Fp8ExpertsTest, SharedExpertBesideFp8Experts) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  auto a = make_fp8_experts(h, 8, 256, 128, {128, 128});
  for (int64_t Is : {128, 256, 64})
    for (int64_t T : {1, 2}) run_fp8_experts(h, *a, T, 2, backend::Activation::Silu, Is);
  run_fp8_experts(h, *a, 1, 2, backend::Activation::Situ, 128);
  run_fp8_experts(h, *a, 3, 2, backend::Activation::Silu, 128);
  auto b = make_fp8_experts(h, 6, 136, 64, {64, 128});
  for (int64_t T : {1, 2}) run_fp8_experts(h, *b, T, 3, backend::Activation::Silu, 64);
  auto c = make_fp8_experts(h, 8, 96, 40, {1, backend::Fp8Blocks::kWholeRow});
  run_fp8_experts(h, *c, 2, 2, backend::Activation::Silu, 40);
  auto kimi = make_fp8_experts(h, 16, 2304, 1024, {128, 128});
  for (int64_t T : {1, 2}) run_fp8_experts(h, *kimi, T, 8, backend::Activation::Silu, 1024);
}

// The Hopper FP8 path (backend option moe_wgmma_fp8, moe/grouped_wgmma.cu Fp8Weights; 128 x 128 weight
// blocks, I and Hx multiples of 128, at least 128 pairs): it also quantises both GEMMs' activations to E4M3
// per slot and 128 columns (gemm/fp8_native.cu's rule), which the CPU reference does not. Tolerance: a
// double-precision model of these weights at the 48B shape (codes uniform over the non-negative E4M3 bytes,
// block scales in
// +-1/(100 sqrt(fan-in)), x ~ N(0, 1)) gives rel L2 0.0405 from quantising x and h alone; the bf16 roundings
// add well under 1%, so 6e-2 (the dense native FP8 GEMM, one quantised operand, allows 5e-2). Cases: the 48B
// shape (E 256, Hx 2304, I 1024) at 2048 tokens x top-8 and odd token counts (partial 128-slot tiles), skewed
// routing (expert 0 with every token over many tiles, experts with no slot and one with one slot), SiTU, a
// down GEMM with an odd number of column tiles; then the shapes it refuses (widths off 128, fewer than 128
// pairs; per-channel scales with widths off 128) on the existing paths at their own bound. Skipped where the
// backend refuses the option (not sm_90, or no sm_90a in the build).
constexpr double kWgmmaFp8Tol = 6e-2;

TEST_P(Fp8ExpertsTest, Fp8ExpertsGroupedWgmma) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  const Fp8WgmmaSetting wgmma(h.dev(), true);
  if (!wgmma.status().ok()) GTEST_SKIP() << "no moe_wgmma_fp8 path here: " << wgmma.status().to_string();
  const auto silu = backend::Activation::Silu, situ = backend::Activation::Situ;
  auto kimi = make_fp8_experts(h, 256, 2304, 1024, {128, 128});
  auto small = make_fp8_experts(h, 16, 256, 128, {128, 128});  // one k block in down, two in gate_up
  auto odd = make_fp8_experts(h, 8, 384, 256, {128, 128});     // 3 column tiles in down
  run_fp8_experts(h, *kimi, 2048, 8, silu, 0, false, kWgmmaFp8Tol);
  run_fp8_experts(h, *kimi, 301, 8, situ, 0, false, kWgmmaFp8Tol);  // 2408 pairs: partial tiles
  run_fp8_experts(h, *kimi, 17, 8, silu, 0, false, kWgmmaFp8Tol);   // 136 pairs: just over one tile
  run_fp8_experts(h, *kimi, 700, 8, silu, 0, true, kWgmmaFp8Tol);   // expert 0: 700 slots, 6 tiles
  run_fp8_experts(h, *small, 333, 5, silu, 0, true, kWgmmaFp8Tol);
  run_fp8_experts(h, *small, 129, 1, situ, 0, false, kWgmmaFp8Tol);
  run_fp8_experts(h, *odd, 150, 2, silu, 0, false, kWgmmaFp8Tol);
  // Refused, on the existing paths at their bound: fewer than 128 pairs; Hx off 128; other blocks.
  run_fp8_experts(h, *small, 20, 4);
  auto a = make_fp8_experts(h, 8, 160, 128, {128, 128});
  run_fp8_experts(h, *a, 300, 2);
  auto c = make_fp8_experts(h, 8, 96, 64, {1, backend::Fp8Blocks::kWholeRow});  // per channel, widths off 128
  run_fp8_experts(h, *c, 129, 2);
}

// The per-channel policy of the same path (grouped_wgmma.cu Fp8ChannelWeights: one scale per weight row, the
// activations quantised per slot over the whole row, `--quantization ptpc_fp8`): the cases above with
// per-channel scales, and a down GEMM whose last 256-column tile is half past Hx (384: the second box not
// loaded). The same model gives the same bound: E4M3's relative error does not depend on the scale while the
// values stay normal, and x / (amax / 448) falls below E4M3's smallest normal only for |x| < amax / 28672.
TEST_P(Fp8ExpertsTest, Fp8ExpertsGroupedWgmmaPerChannel) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  const Fp8WgmmaSetting wgmma(h.dev(), true);
  if (!wgmma.status().ok()) GTEST_SKIP() << "no moe_wgmma_fp8 path here: " << wgmma.status().to_string();
  const auto silu = backend::Activation::Silu, situ = backend::Activation::Situ;
  const backend::Fp8Blocks channel{1, backend::Fp8Blocks::kWholeRow};
  auto kimi = make_fp8_experts(h, 256, 2304, 1024, channel);
  auto small = make_fp8_experts(h, 16, 256, 128, channel);  // one column tile in each GEMM
  auto odd = make_fp8_experts(h, 8, 384, 256, channel);     // down: 1.5 column tiles
  run_fp8_experts(h, *kimi, 2048, 8, silu, 0, false, kWgmmaFp8Tol);
  run_fp8_experts(h, *kimi, 301, 8, situ, 0, false, kWgmmaFp8Tol);
  run_fp8_experts(h, *kimi, 17, 8, silu, 0, false, kWgmmaFp8Tol);
  run_fp8_experts(h, *kimi, 700, 8, silu, 0, true, kWgmmaFp8Tol);
  run_fp8_experts(h, *small, 333, 5, silu, 0, true, kWgmmaFp8Tol);
  run_fp8_experts(h, *small, 129, 1, situ, 0, false, kWgmmaFp8Tol);
  run_fp8_experts(h, *odd, 150, 2, silu, 0, false, kWgmmaFp8Tol);
  // Fewer than 128 pairs: the decode GEMVs at their own bound.
  run_fp8_experts(h, *small, 20, 4);
}

INSTANTIATE_TEST_SUITE_P(Backends, Fp8ExpertsTest, ::testing::ValuesIn(tested_backends()));

}  // namespace
}  // namespace rill::testing
