// Decode fusion (backend option decode_fusion, src/backend/cuda/README.md): the tested backend with its
// decode-batch fusions on against the same backend with them off. The fused kernels run the same arithmetic
// in the same order as the separate ones, so every output must match bit for bit; the CPU comparisons of the
// fused paths are the op tests themselves (MoeTest.Route*, which run unfused by default and fused in the
// backend_tests(decode_fusion=1) variant).
// Route: the router's expert selection in the last CTA of its logits GEMV, for 1..4 tokens (the GEMV path),
// sigmoid and softmax, with and without bias, grouped or not, Kimi Linear's 256 experts top-8 and odd shapes.
// Input norm: the residual add + RMSNorm folded into the GEMV that reads h (gemm_group: the 48B's KDA, MLA and
// dense-MLP projections in bf16 and FP8, odd widths; the router): h, the residual and the GEMM outputs against
// the CPU's add_rms_norm + GEMMs, and against the unfused backend bit for bit; shapes the fusion refuses (5 rows,
// K3's width at 4 rows) run add_rms_norm first and still match.
// Each fused op is also captured as a graph and replayed twice (the CTAs' arrival counter must be back at zero
// for the second; the residual, updated in place, is restored before each).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/op_harness.h"
#include "test_backend_options.h"

namespace rill::testing {
namespace {

// The tested backend with decode_fusion on and off (this run's other options alike).
struct FusionPair {
  std::unique_ptr<backend::Backend> on, off;
  std::string skip;
};

FusionPair make_fusion_pair(const std::string& name) {
  FusionPair f;
  auto on = make_test_backend(name, "decode_fusion=1");
  auto off = make_test_backend(name, "decode_fusion=0");
  if (!on.ok()) f.skip = "backend " + name + " unavailable: " + on.status().message();
  else if (!off.ok()) f.skip = "backend " + name + " unavailable: " + off.status().message();
  else f.on = std::move(on).value(), f.off = std::move(off).value();
  return f;
}

#define RILL_REQUIRE_PAIR(f) \
  if (!(f).on) GTEST_SKIP() << (f).skip

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

// Every element written (no poison left: NaN, or the -77 of integer outputs) and equal bit for bit.
void expect_identical(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(!std::isnan(want[i]) && want[i] != -77.0f) << what << ": element " << i << " unwritten";
    ASSERT_EQ(bits(got[i]), bits(want[i])) << what << ": element " << i << " " << got[i] << " vs " << want[i];
  }
}

// Overwrites t (contiguous) with the harness's poison (as OpHarness::empty: NaN, -77 for integers) once the
// device's queued work is done.
void poison(backend::Backend& be, const TensorView& t) {
  ASSERT_TRUE(be.synchronize().ok());
  ASSERT_TRUE(t.is_contiguous());
  std::vector<char> host(t.nbytes());
  for (int64_t i = 0; i < t.numel(); ++i) {
    char* p = host.data() + size_t(i) * dtype_size(t.dtype);
    if (t.dtype == DType::I32) {
      const int32_t v = -77;
      std::memcpy(p, &v, sizeof v);
    } else if (t.dtype == DType::F32) {
      const float v = NAN;
      std::memcpy(p, &v, sizeof v);
    } else {
      const uint16_t v = 0x7fc0;  // bf16 NaN
      std::memcpy(p, &v, sizeof v);
    }
  }
  ASSERT_TRUE(be.copy_to_device(t.data, host.data(), host.size()).ok());
}

// Runs `op` captured as a graph on `be`, twice, each time after `reset` (which poisons the outputs and restores
// any input the op updates in place), and requires each replay to reproduce `want` (the eager results of
// `outputs`, in order).
void expect_replays(OpHarness& h, backend::Backend& be, const std::function<Status()>& op,
                    const std::function<void()>& reset, const std::vector<TensorView>& outputs,
                    const std::vector<std::vector<float>>& want) {
  if (!be.can_capture()) return;
  auto work = be.capture(op);
  ASSERT_TRUE(work.ok()) << work.status().to_string();
  for (int replay = 0; replay < 2; ++replay) {
    reset();
    ASSERT_TRUE((*work)->replay().ok());
    for (size_t i = 0; i < outputs.size(); ++i)
      expect_identical(h.get(be, outputs[i]), want[i], "replay " + std::to_string(replay) + " output " +
                                                           std::to_string(i));
  }
}

// ------------------------------------------------------------------------------------------------- route

struct RouteShape {
  int64_t T, H, E;
  int top_k, n_groups = 1, topk_group = 1;
  bool softmax = false, bias = true;
};

struct RouteRun {
  BackendTensor x, w, bias, ids, weights;
  backend::MoeRouteArgs args;
};

RouteRun route_inputs(OpHarness& h, backend::Backend& be, const RouteShape& c, const std::vector<float>& x,
                      const std::vector<float>& w, const std::vector<float>& bias) {
  RouteRun r;
  r.x = h.put(be, x, DType::BF16, {c.T, c.H});
  r.w = h.put(be, w, DType::BF16, {c.E, c.H});
  r.bias = h.put(be, bias, DType::F32, {c.E});
  r.ids = h.empty(be, DType::I32, {c.T, c.top_k});
  r.weights = h.empty(be, DType::F32, {c.T, c.top_k});
  r.args = backend::MoeRouteArgs{r.x.view,      r.w.view,     c.bias ? r.bias.view : TensorView{},
                                 c.top_k,       c.n_groups,   c.topk_group,
                                 /*renormalize=*/true, c.softmax, /*scaling=*/2.446f,
                                 r.ids.view,    r.weights.view};
  return r;
}

void route_on_off(OpHarness& h, FusionPair& f, const RouteShape& c) {
  SCOPED_TRACE(::testing::Message() << "T " << c.T << " H " << c.H << " E " << c.E << " top_k " << c.top_k
                                    << " groups " << c.n_groups << "/" << c.topk_group
                                    << (c.softmax ? " softmax" : " sigmoid") << (c.bias ? " bias" : ""));
  const std::vector<float> x = h.randn(c.T * c.H);
  const std::vector<float> w = h.randn(c.E * c.H, 1.5f / std::sqrt(float(c.H)));
  std::vector<float> bias(size_t(c.E));
  for (int64_t e = 0; e < c.E; ++e) bias[size_t(e)] = 0.03f * float((e * 37) % c.E);
  RouteRun on = route_inputs(h, *f.on, c, x, w, bias), off = route_inputs(h, *f.off, c, x, w, bias);
  ASSERT_TRUE(f.off->moe_route(off.args).ok());
  const Status st = f.on->moe_route(on.args);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const std::vector<float> ids = h.get(*f.off, off.ids.view), weights = h.get(*f.off, off.weights.view);
  expect_identical(h.get(*f.on, on.ids.view), ids, "ids");
  expect_identical(h.get(*f.on, on.weights.view), weights, "weights");
  expect_replays(
      h, *f.on, [&] { return f.on->moe_route(on.args); },
      [&] {
        poison(*f.on, on.ids.view);
        poison(*f.on, on.weights.view);
      },
      {on.ids.view, on.weights.view}, {ids, weights});
}

class DecodeFusionTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeFusionTest, RouteMatchesUnfused) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  FusionPair f = make_fusion_pair(GetParam());
  RILL_REQUIRE_PAIR(f);
  for (int64_t T = 1; T <= 4; ++T) {
    for (bool bias : {true, false}) {
      route_on_off(h, f, {T, 2304, 256, 8, 1, 1, false, bias});  // Kimi Linear 48B
      route_on_off(h, f, {T, 2304, 256, 8, 8, 4, false, bias});  // grouped
    }
    route_on_off(h, f, {T, 200, 24, 3, 1, 1, true});    // odd: softmax, 24 experts
    route_on_off(h, f, {T, 136, 96, 5, 4, 2, false});   // odd, grouped
    route_on_off(h, f, {T, 64, 1024, 33, 1, 1, false});  // the most experts; top-k past one warp's lanes
  }
}

// -------------------------------------------------------------------------------------------- input norm

// CUDA rounds y = x * r to bf16 before the weight and the product again, the CPU keeps fp32 (norm_test.cc);
// the GEMMs then read that h.
constexpr double kNormTol = 1e-2;
constexpr double kGemmTol = 2e-2;

struct PartShape {
  int64_t N;
  bool fp8 = false;
  backend::Fp8Blocks blocks{128, 128};
};

// A part's weight [N, K] on one backend, the same values on every backend: bf16 from fill_random (bit-identical
// across backends, elementwise_test) or the given FP8 codes and F32 block scales.
struct PlacedWeight {
  BackendTensor w, scales;
  backend::LinearWeight lw;
};

struct HostFp8 {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

HostFp8 host_fp8(OpHarness& h, const PartShape& p, int64_t K) {
  HostFp8 q;
  if (!p.fp8) return q;
  q.codes.resize(size_t(p.N * K));
  std::uniform_int_distribution<int> code(0, 254);
  for (auto& c : q.codes) {
    c = uint8_t(code(h.rng()));
    if (c == 0x7f) c = 0x7e;  // no NaN code
  }
  q.scales = h.uniform(p.blocks.scale_rows(p.N) * p.blocks.scale_cols(K), 0.5f / (16 * std::sqrt(float(K))),
                       1.5f / (16 * std::sqrt(float(K))), false);
  return q;
}

std::unique_ptr<PlacedWeight> place_weight(OpHarness& h, backend::Backend& be, const PartShape& p, int64_t K,
                                           const HostFp8& q, uint64_t seed) {
  auto pw = std::make_unique<PlacedWeight>();
  auto a = be.allocate(size_t(p.N * K) * (p.fp8 ? 1 : 2));
  EXPECT_TRUE(a.ok());
  pw->w.alloc = std::move(a).value();
  if (!p.fp8) {
    pw->w.view = TensorView::make(pw->w.alloc.data(), DType::BF16, {p.N, K}, be.device());
    const float r = std::sqrt(3.0f / float(K));
    EXPECT_TRUE(be.fill_random(pw->w.view, seed, -r, r).ok());
    pw->lw = backend::LinearWeight{pw->w.view};
    return pw;
  }
  pw->w.view = TensorView::make(pw->w.alloc.data(), DType::F8E4M3, {p.N, K}, be.device());
  EXPECT_TRUE(be.copy_to_device(pw->w.alloc.data(), q.codes.data(), q.codes.size()).ok());
  pw->scales = h.put(be, q.scales, DType::F32, {p.blocks.scale_rows(p.N), p.blocks.scale_cols(K)});
  pw->lw = backend::LinearWeight{pw->w.view, pw->scales.view, backend::WeightFormat::Fp8, p.blocks};
  return pw;
}

// The join's operands on one backend (the CPU keeps activations in F32): residual (F32, updated in place), delta,
// the norm weight and h, the norm's out.
struct JoinSide {
  BackendTensor residual, delta, gamma, h;
  backend::AddRmsNormArgs norm;
};

struct JoinHost {
  std::vector<float> residual, delta, gamma;
};

JoinHost join_host(OpHarness& h, int64_t M, int64_t K) {
  return {h.randn(M * K, 2.0f, false), h.randn(M * K), h.uniform(K, 0.5f, 1.5f, false)};
}

void place_join(OpHarness& h, backend::Backend& be, const JoinHost& j, int64_t M, int64_t K, JoinSide& s) {
  const DType act = be.device() == Device::Cpu ? DType::F32 : DType::BF16;
  s.residual = h.put(be, j.residual, DType::F32, {M, K});
  s.delta = h.put(be, j.delta, act, {M, K});
  s.gamma = h.put(be, j.gamma, DType::F32, {K});
  s.h = h.empty(be, act, {M, K});
  s.norm = {s.residual.view, s.delta.view, s.gamma.view, 1e-5f, s.h.view};
}

// The join against the CPU's add_rms_norm (the residual exactly: the same fp32 sums) and fused against unfused
// bit for bit.
void expect_join(OpHarness& h, FusionPair& f, const JoinSide& cpu, const JoinSide& on, const JoinSide& off) {
  const std::vector<float> r_on = h.get(*f.on, on.residual.view);
  expect_identical(r_on, h.get(h.cpu(), cpu.residual.view), "residual against the CPU");
  expect_identical(r_on, h.get(*f.off, off.residual.view), "residual");
  const std::vector<float> h_on = h.get(*f.on, on.h.view);
  EXPECT_LE(rel_l2(h_on, h.get(h.cpu(), cpu.h.view)), kNormTol);
  expect_identical(h_on, h.get(*f.off, off.h.view), "h");
}

// expect_replays for an op with an input norm: outputs[0] is the residual (restored from `j` before each
// replay: the op updates it in place), the rest are poisoned.
void expect_join_replays(OpHarness& h, backend::Backend& be, const std::function<Status()>& op,
                         const JoinHost& j, const std::vector<TensorView>& outputs,
                         const std::vector<std::vector<float>>& want) {
  auto reset = [&] {
    ASSERT_TRUE(be.synchronize().ok());
    ASSERT_TRUE(be.copy_to_device(outputs[0].data, j.residual.data(), j.residual.size() * sizeof(float)).ok());
    for (size_t i = 1; i < outputs.size(); ++i) poison(be, outputs[i]);
  };
  expect_replays(h, be, op, reset, outputs, want);
}

struct GroupSide : JoinSide {
  std::vector<std::unique_ptr<PlacedWeight>> weights;
  std::vector<BackendTensor> outs;
  backend::GemmGroupArgs group;
};

struct NormGroupCase {
  int64_t M, K;
  std::vector<PartShape> parts;
  bool fuses;  // whether the fused backend folds the norm in (else it runs add_rms_norm first)
};

std::unique_ptr<GroupSide> group_side(OpHarness& h, backend::Backend& be, const NormGroupCase& c, const JoinHost& j,
                                      const std::vector<HostFp8>& q) {
  auto s = std::make_unique<GroupSide>();
  place_join(h, be, j, c.M, c.K, *s);
  for (size_t i = 0; i < c.parts.size(); ++i) {
    s->weights.push_back(place_weight(h, be, c.parts[i], c.K, q[i], h.seed() + i));
    s->outs.push_back(h.empty(be, s->h.view.dtype, {c.M, c.parts[i].N}));
  }
  for (size_t i = 0; i < c.parts.size(); ++i) s->group.parts.push_back({s->h.view, &s->weights[i]->lw, s->outs[i].view});
  s->group.norm = &s->norm;
  return s;
}

void norm_group_case(OpHarness& h, FusionPair& f, const NormGroupCase& c) {
  ::testing::Message m;
  m << "M " << c.M << " K " << c.K << " parts";
  for (const PartShape& p : c.parts) m << " " << p.N << (p.fp8 ? " fp8" : "");
  SCOPED_TRACE(m);
  const JoinHost j = join_host(h, c.M, c.K);
  std::vector<HostFp8> q;
  for (const PartShape& p : c.parts) q.push_back(host_fp8(h, p, c.K));
  auto cpu = group_side(h, h.cpu(), c, j, q), on = group_side(h, *f.on, c, j, q), off = group_side(h, *f.off, c, j, q);
  EXPECT_EQ(f.on->gemm_group_fuses_norm(on->group), c.fuses);
  EXPECT_FALSE(f.off->gemm_group_fuses_norm(off->group));
  ASSERT_TRUE(h.cpu().gemm_group(cpu->group).ok());
  ASSERT_TRUE(f.off->gemm_group(off->group).ok());
  const Status st = f.on->gemm_group(on->group);
  ASSERT_TRUE(st.ok()) << st.to_string();
  expect_join(h, f, *cpu, *on, *off);
  std::vector<TensorView> outputs{on->residual.view, on->h.view};
  std::vector<std::vector<float>> want{h.get(*f.on, on->residual.view), h.get(*f.on, on->h.view)};
  for (size_t i = 0; i < c.parts.size(); ++i) {
    const std::vector<float> y = h.get(*f.on, on->outs[i].view);
    EXPECT_LE(rel_l2(y, h.get(h.cpu(), cpu->outs[i].view)), kGemmTol) << "part " << i;
    expect_identical(y, h.get(*f.off, off->outs[i].view), "part " + std::to_string(i));
    outputs.push_back(on->outs[i].view);
    want.push_back(y);
  }
  expect_join_replays(h, *f.on, [&] { return f.on->gemm_group(on->group); }, j, outputs, want);
}

TEST_P(DecodeFusionTest, NormFoldsIntoGemmGroup) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  FusionPair f = make_fusion_pair(GetParam());
  RILL_REQUIRE_PAIR(f);
  const backend::Fp8Blocks per_channel{1, backend::Fp8Blocks::kWholeRow};
  for (int64_t M = 1; M <= 4; ++M) {
    // Kimi Linear 48B: the KDA input projections (q|k|v, f_a, b, g_a), bf16 and FP8; the MLA ones (q, kv_a).
    norm_group_case(h, f, {M, 2304, {{12288}, {128}, {32}, {128}}, true});
    norm_group_case(h, f, {M, 2304, {{12288, true}, {128, true}, {32, true}, {128, true}}, true});
    norm_group_case(h, f, {M, 2304, {{6144}, {576}}, true});
    // `--quantization fp8` keeps the KDA gate projections bf16: one launch per weight policy, the norm in the first.
    norm_group_case(h, f, {M, 2304, {{12288, true}, {128}, {32}, {128}}, true});
    // Odd widths: 17 norm threads of 8 columns (a partial warp), FP8 rows of 8-code chunks.
    norm_group_case(h, f, {M, 136, {{40}, {3}}, true});
    norm_group_case(h, f, {M, 200, {{24, true, per_channel}, {8, true, per_channel}}, true});
  }
  norm_group_case(h, f, {1, 2304, {{18432}}, true});   // the dense layer's gate|up
  norm_group_case(h, f, {3, 7168, {{64}}, true});      // K3's width: 3 rows fit the shared memory
  norm_group_case(h, f, {4, 7168, {{64}}, false});     // 4 do not: add_rms_norm, then the GEMV
  norm_group_case(h, f, {5, 2304, {{128}, {32}}, false});  // past the GEMV's rows
}

// The router with the join folded into its logits GEMV (and the selection in its tail): h and the residual
// against the CPU, ids and weights against the unfused backend bit for bit (their CPU comparison is
// MoeTest.Route*'s: here the CPU routes from its fp32 h, which may pick differently at near ties).
struct RouteSide : JoinSide {
  RouteRun r;
};

void norm_route_case(OpHarness& h, FusionPair& f, const RouteShape& c) {
  SCOPED_TRACE(::testing::Message() << "T " << c.T << " H " << c.H << " E " << c.E << " top_k " << c.top_k
                                    << " groups " << c.n_groups << "/" << c.topk_group);
  const JoinHost j = join_host(h, c.T, c.H);
  const std::vector<float> w = h.randn(c.E * c.H, 1.5f / std::sqrt(float(c.H)));
  std::vector<float> bias(size_t(c.E));
  for (int64_t e = 0; e < c.E; ++e) bias[size_t(e)] = 0.03f * float((e * 37) % c.E);
  auto side = [&](backend::Backend& be) {
    auto s = std::make_unique<RouteSide>();
    place_join(h, be, j, c.T, c.H, *s);
    s->r = route_inputs(h, be, c, std::vector<float>(size_t(c.T * c.H), 0.0f), w, bias);
    s->r.args.x = s->h.view;
    s->r.args.norm = &s->norm;
    return s;
  };
  auto cpu = side(h.cpu()), on = side(*f.on), off = side(*f.off);
  EXPECT_TRUE(f.on->moe_route_fuses_norm(on->r.args));
  EXPECT_FALSE(f.off->moe_route_fuses_norm(off->r.args));
  ASSERT_TRUE(h.cpu().moe_route(cpu->r.args).ok());
  ASSERT_TRUE(f.off->moe_route(off->r.args).ok());
  const Status st = f.on->moe_route(on->r.args);
  ASSERT_TRUE(st.ok()) << st.to_string();
  expect_join(h, f, *cpu, *on, *off);
  const std::vector<TensorView> outputs{on->residual.view, on->h.view, on->r.ids.view, on->r.weights.view};
  std::vector<std::vector<float>> want;
  for (const TensorView& t : outputs) want.push_back(h.get(*f.on, t));
  expect_identical(want[2], h.get(*f.off, off->r.ids.view), "ids");
  expect_identical(want[3], h.get(*f.off, off->r.weights.view), "weights");
  expect_join_replays(h, *f.on, [&] { return f.on->moe_route(on->r.args); }, j, outputs, want);
}

TEST_P(DecodeFusionTest, NormFoldsIntoRoute) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  FusionPair f = make_fusion_pair(GetParam());
  RILL_REQUIRE_PAIR(f);
  for (int64_t T = 1; T <= 4; ++T) {
    norm_route_case(h, f, {T, 2304, 256, 8});        // Kimi Linear 48B
    norm_route_case(h, f, {T, 2304, 256, 8, 8, 4});  // grouped
    norm_route_case(h, f, {T, 136, 24, 3, 1, 1, true, false});  // odd width, softmax, no bias
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, DecodeFusionTest, ::testing::ValuesIn(tested_backends()));

}  // namespace
}  // namespace rill::testing
