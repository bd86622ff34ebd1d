// K3 Block AttnRes depth mix (attn_res_mix) on the CPU reference against the spec §3.9 formula evaluated in
// double precision here: weightless RMS keys, logits against norm.weight * proj.weight, softmax over depth,
// a mix of the raw candidates.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "test_seed.h"

namespace rill::backend {
namespace {

std::vector<double> mix_reference(const std::vector<float>& v, const std::vector<float>& norm,
                                  const std::vector<float>& proj, int64_t N, int64_t T, int64_t H,
                                  double eps) {
  std::vector<double> out(static_cast<size_t>(T * H), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> z(static_cast<size_t>(N));
    for (int64_t j = 0; j < N; ++j) {
      const float* x = &v[size_t((j * T + t) * H)];
      double ms = 0;
      for (int64_t c = 0; c < H; ++c) ms += double(x[c]) * x[c];
      ms /= double(H);
      double s = 0;
      for (int64_t c = 0; c < H; ++c)
        s += double(x[c]) / std::sqrt(ms + eps) * norm[size_t(c)] * proj[size_t(c)];
      z[size_t(j)] = s;
    }
    double zmax = z[0], sum = 0;
    for (double q : z) zmax = std::max(zmax, q);
    for (double& q : z) sum += (q = std::exp(q - zmax));
    for (int64_t j = 0; j < N; ++j)
      for (int64_t c = 0; c < H; ++c)
        out[size_t(t * H + c)] += z[size_t(j)] / sum * v[size_t((j * T + t) * H + c)];
  }
  return out;
}

TEST(AttnResMix, MatchesTheFormulaInDoublePrecision) {
  const uint32_t seed = rill::testing::test_seed();  // RILL_TEST_SEED replays
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  auto be = make_cpu_backend();
  for (int64_t N : {1, 2, 5, 9}) {
    const int64_t T = 7, H = 96;
    HostTensor cand = HostTensor::zeros(DType::F32, {N, T, H});
    HostTensor norm = HostTensor::zeros(DType::F32, {H}), proj = HostTensor::zeros(DType::F32, {H});
    for (int64_t j = 0; j < N; ++j) {
      const float scale = 0.2f + 3.0f * float(j);  // candidates of very different magnitudes
      for (int64_t i = 0; i < T * H; ++i) cand.view.ptr<float>()[j * T * H + i] = scale * n01(rng);
    }
    for (int64_t c = 0; c < H; ++c) {
      norm.view.ptr<float>()[c] = 1.0f + 0.1f * n01(rng);
      proj.view.ptr<float>()[c] = n01(rng) / std::sqrt(float(H)) * 3.0f;  // sharp, far from uniform
    }
    HostTensor out = HostTensor::zeros(DType::F32, {T, H});
    ASSERT_TRUE(be->attn_res_mix({cand.view, norm.view, proj.view, 1e-5f, out.view}).ok());
    const std::vector<float> v(cand.view.ptr<float>(), cand.view.ptr<float>() + cand.view.numel());
    const std::vector<float> nw(norm.view.ptr<float>(), norm.view.ptr<float>() + H);
    const std::vector<float> pw(proj.view.ptr<float>(), proj.view.ptr<float>() + H);
    const std::vector<double> want = mix_reference(v, nw, pw, N, T, H, 1e-5);
    for (int64_t i = 0; i < T * H; ++i) {
      const double got = out.view.ptr<float>()[i];
      // fp32 rounding of a convex mix is bounded by the candidates' magnitudes, not the result's.
      double scale = 1.0;
      for (int64_t j = 0; j < N; ++j) scale += std::fabs(v[size_t(j * T * H + i)]);
      EXPECT_NEAR(got, want[size_t(i)], 1e-6 * scale) << "N " << N << " element " << i;
      if (N == 1) {
        EXPECT_EQ(out.view.ptr<float>()[i], cand.view.ptr<float>()[i]);  // one candidate: itself
      }
    }
  }
}

TEST(AttnResMix, RejectsMismatchedShapes) {
  auto be = make_cpu_backend();
  HostTensor cand = HostTensor::zeros(DType::F32, {3, 4, 8});
  HostTensor w = HostTensor::zeros(DType::F32, {8}), bad_w = HostTensor::zeros(DType::F32, {7});
  HostTensor out = HostTensor::zeros(DType::F32, {4, 8}), bad_out = HostTensor::zeros(DType::F32, {5, 8});
  EXPECT_TRUE(be->attn_res_mix({cand.view, w.view, w.view, 1e-5f, out.view}).ok());
  const Status a = be->attn_res_mix({cand.view, bad_w.view, w.view, 1e-5f, out.view});
  EXPECT_NE(a.message().find("attn_res_mix: norm_weight dim 0 must be 8"), std::string::npos) << a.message();
  const Status b = be->attn_res_mix({cand.view, w.view, w.view, 1e-5f, bad_out.view});
  EXPECT_NE(b.message().find("out dim 0 must be 4"), std::string::npos) << b.message();
}

}  // namespace
}  // namespace rill::backend
