// Cross-backend tests of the MoE family (src/backend/cuda/moe) against the CPU reference.
// moe_route: sigmoid and softmax scores, bias, grouped top-k, renormalisation and scaling, tiny and
// Kimi-Linear shapes (256 experts, top-8, hidden 2304) for decode and prefill token counts. Ids must match
// exactly, except for tokens whose selection has a near tie (two candidate scores within 1e-3 at a decision
// boundary, found by an fp64 host model), where the fp32 summation order may legitimately decide differently.
// moe_experts: the decode path (T*k <= 64), the grouped path (T = 64 and 512), SiLU and SiTU, odd widths
// (the scalar fallback), expert ids outside [0, E) (skipped on CUDA; the CPU gets weight 0 for them), and a
// shared expert (the CPU side runs it through Backend's unfused gemm, glu, gemm, add).
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/op_harness.h"
#include "backend/workspace_planner.h"
#include "test_backend_options.h"

namespace rill::testing {
namespace {

// Experts: CUDA rounds gate/up, the activation and each expert's output to bf16 (the reference's bf16
// GEMMs); the CPU keeps fp32 throughout: ~3e-3 rel-L2.
constexpr double kExpertsTol = 1e-2;
constexpr double kTieMargin = 1e-3;

// Reserves an op's scratch by planning (as the model plans its workspace) on the tested backend.
struct DeviceScratch {
  backend::DeviceAllocation mem;
  std::unique_ptr<Arena> arena;
};

DeviceScratch plan_scratch(OpHarness& h, backend::MoeExpertsArgs a) {
  Arena measure(nullptr, 0, Device::Cuda);
  a.scratch = &measure;
  EXPECT_TRUE(backend::WorkspacePlanner(h.dev()).moe_experts(a).ok());
  DeviceScratch s;
  auto m = h.dev().allocate(measure.high_water() + 256);
  EXPECT_TRUE(m.ok());
  s.mem = std::move(m).value();
  EXPECT_TRUE(
      h.dev()
          .fill_random(TensorView::make(s.mem.data(), DType::U8, {int64_t(s.mem.size())}, Device::Cuda), 9, 0,
                       255)
          .ok());
  s.arena = std::make_unique<Arena>(s.mem.data(), s.mem.size(), Device::Cuda);
  return s;
}

// ------------------------------------------------------------------------------------------------- routing

struct RouteCase {
  int64_t T, H, E;
  int top_k, n_groups = 1, topk_group = 1;
  bool softmax = false, renormalize = true, bias = true;
  float scaling = 2.446f;
};

// fp64 model of the selection, used only to find tokens with a near tie at a decision boundary.
bool near_tie(const RouteCase& c, const float* x, const std::vector<float>& w,
              const std::vector<float>& bias) {
  std::vector<double> s(size_t(c.E)), sel(size_t(c.E));
  for (int64_t e = 0; e < c.E; ++e) {
    double acc = 0;
    for (int64_t i = 0; i < c.H; ++i) acc += double(x[i]) * w[size_t(e * c.H + i)];
    s[size_t(e)] = acc;
  }
  if (c.softmax) {
    const double mx = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double& v : s) sum += (v = std::exp(v - mx));
    for (double& v : s) v /= sum;
  } else {
    for (double& v : s) v = 1.0 / (1.0 + std::exp(-v));
  }
  for (int64_t e = 0; e < c.E; ++e) sel[size_t(e)] = s[size_t(e)] + (c.bias ? bias[size_t(e)] : 0.0);
  auto boundary_tie = [](std::vector<double> v, int k) {  // the k-th and (k+1)-th largest decide membership
    if (k >= int(v.size())) return false;
    std::sort(v.begin(), v.end(), std::greater<double>());
    return std::isfinite(v[size_t(k)]) && v[size_t(k) - 1] - v[size_t(k)] < kTieMargin;
  };
  if (c.n_groups > 1 && c.topk_group < c.n_groups) {
    const int64_t per = c.E / c.n_groups;
    std::vector<double> gs(size_t(c.n_groups));
    for (int g = 0; g < c.n_groups; ++g) {
      std::vector<double> v(sel.begin() + g * per, sel.begin() + (g + 1) * per);
      std::sort(v.begin(), v.end(), std::greater<double>());
      gs[size_t(g)] = v[0] + v[1];
    }
    if (boundary_tie(gs, c.topk_group)) return true;
    std::vector<int> order(size_t(c.n_groups));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return gs[size_t(a)] > gs[size_t(b)]; });
    std::vector<char> keep(size_t(c.n_groups), 0);
    for (int i = 0; i < c.topk_group; ++i) keep[size_t(order[size_t(i)])] = 1;
    for (int64_t e = 0; e < c.E; ++e)
      if (!keep[size_t(e / per)]) sel[size_t(e)] = -INFINITY;
  }
  return boundary_tie(sel, c.top_k);
}

void run_route(OpHarness& h, const RouteCase& c) {
  SCOPED_TRACE(::testing::Message() << "T " << c.T << " H " << c.H << " E " << c.E << " top_k " << c.top_k
                                    << " groups " << c.n_groups << "/" << c.topk_group
                                    << (c.softmax ? " softmax" : " sigmoid")
                                    << (c.renormalize ? " renorm" : ""));
  const std::vector<float> x = h.randn(c.T * c.H);
  const std::vector<float> w = h.randn(c.E * c.H, 1.5f / std::sqrt(float(c.H)));
  // Bias: a shuffled ladder with steps of 0.03, comparable to the spread of the top sigmoid scores, so the
  // selection depends on the token but rarely has a near tie.
  std::vector<float> bias(size_t(c.E));
  for (int64_t e = 0; e < c.E; ++e) bias[size_t(e)] = 0.03f * float(e);
  std::shuffle(bias.begin(), bias.end(), h.rng());
  auto [xc, xd] = h.put_both(x, DType::F32, DType::BF16, {c.T, c.H});
  auto [wc, wd] = h.put_both(w, DType::BF16, DType::BF16, {c.E, c.H});
  auto [bc, bd] = h.put_both(bias, DType::F32, DType::F32, {c.E});
  BackendTensor ic = h.empty(h.cpu(), DType::I32, {c.T, c.top_k}),
                id = h.empty(h.dev(), DType::I32, {c.T, c.top_k});
  BackendTensor gc = h.empty(h.cpu(), DType::F32, {c.T, c.top_k}),
                gd = h.empty(h.dev(), DType::F32, {c.T, c.top_k});
  auto args = [&](const BackendTensor& xt, const BackendTensor& wt, const BackendTensor& bt,
                  const BackendTensor& it, const BackendTensor& gt) {
    return backend::MoeRouteArgs{xt.view,       wt.view,    c.bias ? bt.view : TensorView{},
                                 c.top_k,       c.n_groups, c.topk_group,
                                 c.renormalize, c.softmax,  c.scaling,
                                 it.view,       gt.view};
  };
  ASSERT_TRUE(h.cpu().moe_route(args(xc, wc, bc, ic, gc)).ok());
  const Status st = h.dev().moe_route(args(xd, wd, bd, id, gd));
  ASSERT_TRUE(st.ok()) << st.to_string();
  const std::vector<float> ids_c = h.get(h.cpu(), ic.view), ids_d = h.get(h.dev(), id.view);
  const std::vector<float> w_c = h.get(h.cpu(), gc.view), w_d = h.get(h.dev(), gd.view);
  int ties = 0;
  for (int64_t t = 0; t < c.T; ++t) {
    if (near_tie(c, x.data() + t * c.H, w, bias)) {
      ++ties;
      continue;
    }
    // Both backends list the experts best first; a near tie inside the selection may swap two slots, so
    // compare (id, weight) sets.
    std::vector<std::pair<float, float>> cpu_sel, dev_sel;
    for (int j = 0; j < c.top_k; ++j) {
      const size_t i = size_t(t * c.top_k + j);
      cpu_sel.emplace_back(ids_c[i], w_c[i]);
      dev_sel.emplace_back(ids_d[i], w_d[i]);
    }
    std::sort(cpu_sel.begin(), cpu_sel.end());
    std::sort(dev_sel.begin(), dev_sel.end());
    for (int j = 0; j < c.top_k; ++j) {
      ASSERT_EQ(dev_sel[size_t(j)].first, cpu_sel[size_t(j)].first) << "token " << t;
      ASSERT_NEAR(dev_sel[size_t(j)].second, cpu_sel[size_t(j)].second,
                  1e-4 * std::max(1.0f, cpu_sel[size_t(j)].second))
          << "token " << t << " expert " << cpu_sel[size_t(j)].first;
    }
  }
  EXPECT_LE(ties, std::max<int64_t>(2, c.T / 4)) << "too many near ties: the inputs do not test much";
}

class MoeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeTest, RouteTiny) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (int64_t T : {1, 7, 64, 300}) {
    run_route(h, {T, 64, 16, 4});
    run_route(h, {T, 64, 16, 4, 4, 2});
    run_route(h, {T, 64, 8, 2, 1, 1, true, true, false, 1.0f});
    run_route(h, {T, 64, 16, 1, 1, 1, false, true});  // top-1: no renormalisation
    run_route(h, {T, 64, 16, 3, 1, 1, false, false});
  }
}

TEST_P(MoeTest, RouteKimiLinearShapes) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  for (int64_t T : {1, 2, 3, 4, 7, 64, 300}) {  // 1..4: the decode GEMV (its selection fused by default)
    run_route(h, {T, 2304, 256, 8});
    run_route(h, {T, 2304, 256, 8, 8, 4});
    run_route(h, {T, 2304, 256, 8, 1, 1, true});
  }
  run_route(h, {5, 7168, 896, 16});  // K3-sized router: the largest shared-memory footprint
}

// Steps of at least moe_route_gemm_min_tokens tokens take the logits GEMM + selection kernel, fewer the
// cluster kernel: both paths at the same sizes, and a step of three logit chunks (896 experts: 1,170 tokens
// a chunk of moe::kRouteLogitsFloats).
TEST_P(MoeTest, RouteGemmAndClusterPaths) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  if (!h.dev().set_option("moe_route_gemm_min_tokens", "5").ok()) GTEST_SKIP() << "no router paths to choose";
  for (const char* min_tokens : {"5", "1073741824"}) {
    SCOPED_TRACE(::testing::Message() << "moe_route_gemm_min_tokens=" << min_tokens);
    ASSERT_TRUE(h.dev().set_option("moe_route_gemm_min_tokens", min_tokens).ok());
    for (int64_t T : {5, 64, 300, 2048}) run_route(h, {T, 2304, 256, 8, 8, 4});
    for (int64_t T : {5, 300}) run_route(h, {T, 2304, 256, 8, 1, 1, true});
    run_route(h, {2500, 256, 896, 16});
    run_route(h, {33, 7168, 896, 16, 1, 1, false, false});
  }
  ASSERT_TRUE(h.dev()
                  .set_option("moe_route_gemm_min_tokens",
                              std::to_string(cuda_backend_options().moe_route_gemm_min_tokens))
                  .ok());
}

// ------------------------------------------------------------------------------------------------- experts

struct ExpertsCase {
  int64_t T, Hx, I, E;
  int k;
  backend::Activation act = backend::Activation::Silu;
  bool bad_ids = false;
  int64_t Is =
      0;  // width of a shared expert (0: none); CUDA's decode GEMVs fuse it, elsewhere Backend runs it
  // Skewed routing instead of uniform: every token's first expert is 0 (T slots, several tiles), its second
  // one of 1-3, the rest drawn from [4, E/2); token 0's last expert is E - 1 (exactly one slot) and experts
  // [E/2, E - 1) get none. Needs k >= 3 and k - 2 <= E/2 - 4.
  bool skewed = false;
};

// Stacked expert weights with identical bf16 values on both backends (fill_random is bit-identical).
struct Experts {
  BackendTensor gu_c, gu_d, dn_c, dn_d;
  backend::ExpertWeights cpu, dev;
};

std::unique_ptr<Experts> make_experts(OpHarness& h, int64_t E, int64_t Hx, int64_t I) {
  auto ex = std::make_unique<Experts>();
  auto fill = [&](backend::Backend& be, BackendTensor& t, Shape s, float a, uint64_t seed) {
    auto m = be.allocate(size_t(s.numel()) * 2);
    ASSERT_TRUE(m.ok());
    t.alloc = std::move(m).value();
    t.view = TensorView::make(t.alloc.data(), DType::BF16, s, be.device());
    ASSERT_TRUE(be.fill_random(t.view, seed, -a, a).ok());
  };
  const float agu = std::sqrt(3.0f / float(Hx)), adn = std::sqrt(3.0f / float(I));
  fill(h.cpu(), ex->gu_c, {E, 2 * I, Hx}, agu, h.seed() + 1);
  fill(h.dev(), ex->gu_d, {E, 2 * I, Hx}, agu, h.seed() + 1);
  fill(h.cpu(), ex->dn_c, {E, Hx, I}, adn, h.seed() + 2);
  fill(h.dev(), ex->dn_d, {E, Hx, I}, adn, h.seed() + 2);
  ex->cpu.gate_up = ex->gu_c.view;
  ex->cpu.down = ex->dn_c.view;
  ex->dev.gate_up = ex->gu_d.view;
  ex->dev.down = ex->dn_d.view;
  return ex;
}

// A shared expert (dense gate_up [2 Is, Hx], down [Hx, Is]) with the same bf16 values on both backends.
struct SharedExpert {
  BackendTensor gu_c, gu_d, dn_c, dn_d;
  backend::LinearWeight gu_cpu, dn_cpu, gu_dev, dn_dev;
};

std::unique_ptr<SharedExpert> make_shared_expert(OpHarness& h, int64_t Hx, int64_t Is) {
  auto sh = std::make_unique<SharedExpert>();
  auto fill = [&](backend::Backend& be, BackendTensor& t, Shape s, float a, uint64_t seed) {
    auto m = be.allocate(size_t(s.numel()) * 2);
    ASSERT_TRUE(m.ok());
    t.alloc = std::move(m).value();
    t.view = TensorView::make(t.alloc.data(), DType::BF16, s, be.device());
    ASSERT_TRUE(be.fill_random(t.view, seed, -a, a).ok());
  };
  const float agu = std::sqrt(3.0f / float(Hx)), adn = std::sqrt(3.0f / float(Is));
  fill(h.cpu(), sh->gu_c, {2 * Is, Hx}, agu, h.seed() + 3);
  fill(h.dev(), sh->gu_d, {2 * Is, Hx}, agu, h.seed() + 3);
  fill(h.cpu(), sh->dn_c, {Hx, Is}, adn, h.seed() + 4);
  fill(h.dev(), sh->dn_d, {Hx, Is}, adn, h.seed() + 4);
  sh->gu_cpu.weight = sh->gu_c.view;
  sh->dn_cpu.weight = sh->dn_c.view;
  sh->gu_dev.weight = sh->gu_d.view;
  sh->dn_dev.weight = sh->dn_d.view;
  return sh;
}

void run_experts(OpHarness& h, const ExpertsCase& c, const Experts& ex) {
  SCOPED_TRACE(::testing::Message() << "T " << c.T << " Hx " << c.Hx << " I " << c.I << " E " << c.E << " k "
                                    << c.k << (c.act == backend::Activation::Situ ? " situ" : " silu")
                                    << (c.bad_ids ? " bad-ids" : "") << " shared " << c.Is
                                    << (c.skewed ? " skewed" : ""));
  // Distinct experts per token, as the router gives; weights as after renormalisation and scaling.
  std::vector<float> ids_dev, ids_cpu, w_dev, w_cpu;
  std::vector<int> perm(size_t(c.E));
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<int> tail(c.skewed ? size_t(c.E / 2 - 4) : 0);  // skewed routing's draws: experts [4, E/2)
  std::iota(tail.begin(), tail.end(), 4);
  if (c.skewed) {
    ASSERT_TRUE(c.k >= 3 && c.k - 2 <= int(tail.size())) << "skewed routing needs 3 <= k <= E/2 - 2";
  }
  std::uniform_real_distribution<float> wd(0.05f, 0.6f);
  for (int64_t t = 0; t < c.T; ++t) {
    if (c.skewed) {
      std::shuffle(tail.begin(), tail.end(), h.rng());
      perm[0] = 0;
      perm[1] = 1 + int(t % 3);
      for (int j = 2; j < c.k; ++j) perm[size_t(j)] = tail[size_t(j - 2)];
      if (t == 0) perm[size_t(c.k - 1)] = int(c.E - 1);
    } else {
      std::shuffle(perm.begin(), perm.end(), h.rng());
    }
    for (int j = 0; j < c.k; ++j) {
      float id = float(perm[size_t(j)]), w = wd(h.rng());
      ids_cpu.push_back(id);
      w_cpu.push_back(w);
      if (c.bad_ids && (t + j) % 5 == 2) {  // CUDA skips the pair; the CPU sees expert 0 with weight 0
        id = (t % 2) ? -1.0f : float(c.E + 3);
        ids_cpu.back() = 0.0f;
        w_cpu.back() = 0.0f;
      }
      ids_dev.push_back(id);
      w_dev.push_back(w);
    }
  }
  const std::vector<float> x = h.randn(c.T * c.Hx);
  auto [xc, xd] = h.put_both(x, DType::F32, DType::BF16, {c.T, c.Hx});
  BackendTensor ic = h.put(h.cpu(), ids_cpu, DType::I32, {c.T, c.k}),
                id = h.put(h.dev(), ids_dev, DType::I32, {c.T, c.k});
  BackendTensor gc = h.put(h.cpu(), w_cpu, DType::F32, {c.T, c.k}),
                gd = h.put(h.dev(), w_dev, DType::F32, {c.T, c.k});
  BackendTensor yc = h.empty(h.cpu(), DType::F32, {c.T, c.Hx}),
                yd = h.empty(h.dev(), DType::BF16, {c.T, c.Hx});
  const float beta = c.act == backend::Activation::Situ ? 4.0f : 0.0f;
  const float lbeta = c.act == backend::Activation::Situ ? 25.0f : 0.0f;
  backend::MoeExpertsArgs ca{xc.view, ic.view, gc.view, &ex.cpu, c.act, beta, lbeta, yc.view, nullptr};
  backend::MoeExpertsArgs a{xd.view, id.view, gd.view, &ex.dev, c.act, beta, lbeta, yd.view, nullptr};
  std::unique_ptr<SharedExpert> sh;
  std::vector<char> cpu_scratch;
  Arena cpu_arena;
  if (c.Is > 0) {  // the CPU runs the shared expert as separate ops in its scratch (fp32: 4 bytes a value)
    sh = make_shared_expert(h, c.Hx, c.Is);
    ca.shared_gate_up = &sh->gu_cpu;
    ca.shared_down = &sh->dn_cpu;
    a.shared_gate_up = &sh->gu_dev;
    a.shared_down = &sh->dn_dev;
    cpu_scratch.resize(size_t(c.T * (3 * c.Is + c.Hx)) * 4 + 4096);
    cpu_arena = Arena(cpu_scratch.data(), cpu_scratch.size(), Device::Cpu);
    ca.scratch = &cpu_arena;
  }
  const Status cst = h.cpu().moe_experts(ca);
  ASSERT_TRUE(cst.ok()) << cst.to_string();
  DeviceScratch s = plan_scratch(h, a);
  a.scratch = s.arena.get();
  const Status st = h.dev().moe_experts(a);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(s.arena->used(), 0u) << "moe_experts must give its scratch back";
  EXPECT_LE(rel_l2(h.get(h.dev(), yd.view), h.get(h.cpu(), yc.view)), kExpertsTol);
}

TEST_P(MoeTest, ExpertsTiny) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  auto ex8 = make_experts(h, 8, 64, 32);
  for (int64_t T : {1, 2, 3, 4}) run_experts(h, {T, 64, 32, 8, 2}, *ex8);
  run_experts(h, {3, 64, 32, 8, 2, backend::Activation::Situ}, *ex8);
  auto ex16 = make_experts(h, 16, 64, 32);
  for (int64_t T : {17, 512}) {  // 68 and 2048 pairs: the grouped path
    run_experts(h, {T, 64, 32, 16, 4}, *ex16);
    run_experts(h, {T, 64, 32, 16, 4, backend::Activation::Situ}, *ex16);
  }
}

TEST_P(MoeTest, ExpertsKimiLinearShapes) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  auto ex = make_experts(h, 256, 2304, 1024);
  for (int64_t T : {1, 2, 4}) run_experts(h, {T, 2304, 1024, 256, 8}, *ex);  // decode path
  run_experts(h, {9, 2304, 1024, 256, 8}, *ex);   // 72 pairs: grouped, ~1 slot per expert
  run_experts(h, {64, 2304, 1024, 256, 8}, *ex);  // grouped
}

// Many tokens per expert: several 64-slot tiles per expert, column tails (I = 96 is not a multiple of 64).
TEST_P(MoeTest, ExpertsGroupedManyTokens) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  auto ex = make_experts(h, 64, 512, 96);
  run_experts(h, {512, 512, 96, 64, 8}, *ex);
  auto ex2 = make_experts(h, 4, 200, 40);  // K not a multiple of 32, N tails in both GEMMs
  run_experts(h, {300, 200, 40, 4, 2}, *ex2);
}

// Grouped steps (here of 4000+ (token, expert) pairs): on CUDA the expert GEMMs go through cuBLAS's grouped
// GEMM (moe/cublas_grouped.h) by default; each case also runs through rill's mma.sync grouped kernels (backend
// option moe_cublas_grouped = 0) where the backend has the option, with the Hopper kernel (moe_wgmma, the
// default where it takes the shape) off. 1024 experts for 520 tokens leave experts with no slot and with one;
// widths off the 64 x 128 tiles; SiTU; ids out of range.
TEST_P(MoeTest, ExpertsGroupedCublas) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  (void)h.dev().set_option("moe_wgmma", "0");  // a backend without the option has neither path
  auto many = make_experts(h, 1024, 64, 32);
  auto odd = make_experts(h, 4, 200, 40);
  auto kimi = make_experts(h, 256, 2304, 1024);
  for (const char* cublas : {"1", "0"}) {
    if (!h.dev().set_option("moe_cublas_grouped", cublas).ok() && std::string(cublas) == "0")
      break;  // a backend without the option runs its one path once
    SCOPED_TRACE(std::string("moe_cublas_grouped=") + cublas);
    run_experts(h, {520, 64, 32, 1024, 8}, *many);
    run_experts(h, {520, 64, 32, 1024, 8, backend::Activation::Situ}, *many);
    run_experts(h, {600, 64, 32, 1024, 8, backend::Activation::Silu, true}, *many);
    run_experts(h, {2100, 200, 40, 4, 2}, *odd);
    run_experts(h, {512, 2304, 1024, 256, 8}, *kimi);
  }
  (void)h.dev().set_option("moe_cublas_grouped", "1");
  (void)h.dev().set_option("moe_wgmma", "1");
}

// Steps of 8192 pairs or more plan their slots on several CTAs (moe/experts.cu: count per chunk of pairs, a
// scan over the chunks' counts, scatter): chunks that do not divide the pairs, 1024 experts (most absent from
// a chunk), ids out of range, an expert in every chunk (skewed routing); through whichever grouped GEMM the
// backend picks.
TEST_P(MoeTest, ExpertsGroupedMultiCtaPlan) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  auto many = make_experts(h, 1024, 64, 32);
  auto few = make_experts(h, 16, 128, 64);
  run_experts(h, {1100, 64, 32, 1024, 8, backend::Activation::Silu, true}, *many);  // 8800 pairs, 5 chunks
  // 16400 pairs, 9 chunks, skewed: expert 0 takes a slot from every token, so from every chunk
  run_experts(h, {4100, 128, 64, 16, 4, backend::Activation::Situ, false, 0, true}, *few);
}

// A grouped experts step replayed from a CUDA graph, as a decode bucket of 16-31 sequences runs it (160 pairs at
// the 48B shape: the wgmma path on Hopper, rill's mma.sync kernels elsewhere; cuBLAS never runs inside a graph):
// each replay brings new routing and activations in the captured buffers (the plan runs on the device), and each
// matches the CPU reference on them, and the first the eager step on the same inputs bit for bit.
TEST_P(MoeTest, ExpertsGroupedReplayedFromAGraph) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  if (!h.dev().can_capture()) GTEST_SKIP() << "the tested backend does not capture graphs";
  const int64_t T = 20, Hx = 2304, I = 1024, E = 256;
  const int k = 8;
  auto ex = make_experts(h, E, Hx, I);
  BackendTensor xd = h.empty(h.dev(), DType::BF16, {T, Hx}), id = h.empty(h.dev(), DType::I32, {T, k}),
                gd = h.empty(h.dev(), DType::F32, {T, k}), yd = h.empty(h.dev(), DType::BF16, {T, Hx});
  backend::MoeExpertsArgs a{xd.view, id.view, gd.view, &ex->dev, backend::Activation::Silu, 0.0f, 0.0f, yd.view,
                            nullptr};
  DeviceScratch s = plan_scratch(h, a);
  a.scratch = s.arena.get();
  // Round r's inputs: distinct experts per token, weights as the router leaves them, fresh activations; the
  // device copies land in the captured buffers, the CPU runs its reference on the same values.
  std::vector<int> perm(static_cast<size_t>(E));
  std::iota(perm.begin(), perm.end(), 0);
  std::uniform_real_distribution<float> wd(0.05f, 0.6f);
  auto next_round = [&](BackendTensor* yc) {
    std::vector<float> ids, w;
    for (int64_t t = 0; t < T; ++t) {
      std::shuffle(perm.begin(), perm.end(), h.rng());
      for (int j = 0; j < k; ++j) {
        ids.push_back(float(perm[size_t(j)]));
        w.push_back(wd(h.rng()));
      }
    }
    const std::vector<float> x = h.randn(T * Hx);
    auto [xc, xn] = h.put_both(x, DType::F32, DType::BF16, {T, Hx});
    BackendTensor ic = h.put(h.cpu(), ids, DType::I32, {T, k}), in = h.put(h.dev(), ids, DType::I32, {T, k});
    BackendTensor gc = h.put(h.cpu(), w, DType::F32, {T, k}), gn = h.put(h.dev(), w, DType::F32, {T, k});
    for (auto [dst, src] : {std::pair{&xd, &xn}, std::pair{&id, &in}, std::pair{&gd, &gn}})
      ASSERT_TRUE(h.dev().copy_device_to_device(dst->view.data, src->view.data, src->view.nbytes()).ok());
    ASSERT_TRUE(h.dev().synchronize().ok());  // the fresh buffers go out of scope below
    *yc = h.empty(h.cpu(), DType::F32, {T, Hx});
    backend::MoeExpertsArgs ca{xc.view, ic.view, gc.view, &ex->cpu, backend::Activation::Silu, 0.0f, 0.0f,
                               yc->view, nullptr};
    const Status st = h.cpu().moe_experts(ca);
    ASSERT_TRUE(st.ok()) << st.to_string();
  };
  BackendTensor yc;
  next_round(&yc);
  ASSERT_TRUE(h.dev().moe_experts(a).ok());  // eagerly first (one-time set-up such as shared-memory opt-ins)
  const std::vector<float> eager = h.get(h.dev(), yd.view);
  EXPECT_LE(rel_l2(eager, h.get(h.cpu(), yc.view)), kExpertsTol);
  auto work = h.dev().capture([&] { return h.dev().moe_experts(a); });
  ASSERT_TRUE(work.ok()) << work.status().to_string();
  for (int replay = 0; replay < 3; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    if (replay > 0) next_round(&yc);
    ASSERT_TRUE((*work)->replay().ok());
    const std::vector<float> got = h.get(h.dev(), yd.view);
    if (replay == 0) {
      EXPECT_EQ(got, eager) << "the replay of the captured step differs from the eager step";
    }
    EXPECT_LE(rel_l2(got, h.get(h.cpu(), yc.view)), kExpertsTol);
  }
  EXPECT_EQ(s.arena->used(), 0u) << "moe_experts must give its scratch back";
}

// The Hopper grouped GEMM (backend option moe_wgmma, moe/grouped_wgmma.cu: TMA, wgmma, persistent CTAs; the
// default on sm_90 since measured): the 48B shape at 2048 tokens, token counts off the 128-slot tiles, skewed
// routing (one expert with every token over several tiles, experts with none, one with exactly one slot),
// widths off the 256-column tiles and K off the 64-wide stages (I = 96, Hx = 200), the smallest I (64) and a
// last down tile without its second weight box (Hx = 320), SiTU, ids out of range, with cuBLAS on and off
// (the wgmma path goes first either way); then shapes it refuses (I < 64, fewer than 128 pairs, widths off
// 8), which must take the other paths unharmed. Skipped where the backend refuses the option (not an sm_90
// device, or a build without sm_90a).
TEST_P(MoeTest, ExpertsGroupedWgmma) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  if (const Status st = h.dev().set_option("moe_wgmma", "1"); !st.ok())
    GTEST_SKIP() << "no moe_wgmma path here: " << st.to_string();
  const auto silu = backend::Activation::Silu, situ = backend::Activation::Situ;
  auto kimi = make_experts(h, 256, 2304, 1024);
  auto odd = make_experts(h, 16, 200, 96);
  // I = 64: one k stage in down; Hx = 320: down's last tile has 64 columns and no second weight box.
  auto edge = make_experts(h, 16, 320, 64);
  for (const char* cublas : {"1", "0"}) {
    ASSERT_TRUE(h.dev().set_option("moe_cublas_grouped", cublas).ok());
    SCOPED_TRACE(std::string("moe_cublas_grouped=") + cublas);
    run_experts(h, {2048, 2304, 1024, 256, 8}, *kimi);
    run_experts(h, {301, 2304, 1024, 256, 8, situ}, *kimi);  // 2408 pairs: partial tiles in most experts
    run_experts(h, {700, 2304, 1024, 256, 8, silu, false, 0, true}, *kimi);  // expert 0: 700 slots, 6 tiles
    run_experts(h, {333, 200, 96, 16, 3}, *odd);
    run_experts(h, {333, 200, 96, 16, 4, situ, true}, *odd);            // ids out of range
    run_experts(h, {257, 200, 96, 16, 5, silu, false, 0, true}, *odd);  // skewed on few experts
    run_experts(h, {26, 200, 96, 16, 5}, *odd);                         // 130 pairs: just over one tile
    run_experts(h, {300, 320, 64, 16, 4}, *edge);
  }
  auto small = make_experts(h, 16, 64, 32);
  run_experts(h, {512, 64, 32, 16, 4}, *small);  // refused: I < 64 (TMA boxes larger than the tensor)
  auto mid = make_experts(h, 16, 256, 128);
  run_experts(h, {20, 256, 128, 16, 4}, *mid);  // refused: 80 pairs < one 128-slot tile
  auto narrow = make_experts(h, 6, 36, 20);
  run_experts(h, {300, 36, 20, 6, 3}, *narrow);  // widths off 8: the scalar GEMVs, whatever the option
}

// Widths that are not multiples of 8 cannot use 16-byte loads: the scalar GEMV path, even for many pairs.
TEST_P(MoeTest, ExpertsOddWidths) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  auto ex = make_experts(h, 6, 36, 20);
  run_experts(h, {2, 36, 20, 6, 2}, *ex);
  run_experts(h, {40, 36, 20, 6, 3}, *ex);
}

TEST_P(MoeTest, ExpertsSkipOutOfRangeIds) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  auto ex = make_experts(h, 16, 64, 32);
  run_experts(h, {4, 64, 32, 16, 4, backend::Activation::Silu, true}, *ex);    // decode
  run_experts(h, {100, 64, 32, 16, 4, backend::Activation::Silu, true}, *ex);  // grouped
}

// A shared expert with the routed ones: fused into CUDA's decode GEMVs for one or two tokens (its width equal
// to, wider or narrower than the routed experts', the scalar path at odd widths), run as separate ops for
// more tokens and on the grouped path.
TEST_P(MoeTest, ExpertsWithSharedExpert) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  auto ex8 = make_experts(h, 8, 64, 32);
  for (int64_t Is : {32, 48, 16})
    run_experts(h, {2, 64, 32, 8, 2, backend::Activation::Silu, false, Is}, *ex8);
  run_experts(h, {1, 64, 32, 8, 2, backend::Activation::Situ, false, 64}, *ex8);
  // Skipped ids still get the shared expert; three tokens: the decode path without fusing it.
  run_experts(h, {2, 64, 32, 8, 2, backend::Activation::Silu, true, 32}, *ex8);
  run_experts(h, {3, 64, 32, 8, 2, backend::Activation::Silu, false, 32}, *ex8);
  run_experts(h, {40, 64, 32, 8, 2, backend::Activation::Silu, false, 32}, *ex8);  // 80 pairs: grouped
  auto odd = make_experts(h, 6, 36, 20);
  run_experts(h, {2, 36, 20, 6, 2, backend::Activation::Silu, false, 20}, *odd);
  auto kimi = make_experts(h, 256, 2304, 1024);  // k + 1 = 9 slots: the down GEMV's ninth warp
  for (int64_t T : {1, 2, 4})
    run_experts(h, {T, 2304, 1024, 256, 8, backend::Activation::Silu, false, 1024}, *kimi);
}

INSTANTIATE_TEST_SUITE_P(Backends, MoeTest, ::testing::ValuesIn(tested_backends()));

}  // namespace
}  // namespace rill::testing
