// Decode fusion (backend option decode_fusion, src/backend/cuda/gemm/README.md): the tested backend with its
// decode-batch fusions on against the same backend with them off. The fused kernels run the same arithmetic
// in the same order as the separate ones, so every output must match bit for bit; the CPU comparisons of the
// fused paths are the op tests themselves (MoeTest.Route*, which run fused by default and unfused in the
// backend_tests(decode_fusion=0) variant).
// Route: the router's expert selection in the last CTA of its logits GEMV, for 1..4 tokens (the GEMV path),
// sigmoid and softmax, with and without bias, grouped or not, Kimi Linear's 256 experts top-8 and odd shapes;
// and captured as a graph, replayed twice (the CTAs' arrival counter must be back at zero for the second).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
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

// Runs `op` captured as a graph on `be`, twice, after poisoning `outputs`, and requires each replay to
// reproduce `want` (the eager results, in the order of `outputs`).
void expect_replays(OpHarness& h, backend::Backend& be, const std::function<Status()>& op,
                    const std::vector<TensorView>& outputs, const std::vector<std::vector<float>>& want) {
  if (!be.can_capture()) return;
  auto work = be.capture(op);
  ASSERT_TRUE(work.ok()) << work.status().to_string();
  for (int replay = 0; replay < 2; ++replay) {
    for (const TensorView& t : outputs) poison(be, t);
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
  expect_replays(h, *f.on, [&] { return f.on->moe_route(on.args); }, {on.ids.view, on.weights.view},
                 {ids, weights});
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

INSTANTIATE_TEST_SUITE_P(Backends, DecodeFusionTest, ::testing::ValuesIn(tested_backends()));

}  // namespace
}  // namespace rill::testing
