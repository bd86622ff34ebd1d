// The norm family on the CPU backend (src/backend/cpu/norm.cc) against closed forms in fp64 (spec §3.0):
// rms_norm (KimiRMSNorm; the rounding before the weight is the identity for the CPU's F32 activations) on
// strided rows, in place and with rows small enough that eps matters; add_rms_norm over the fp32 residual
// stream; kda_output, the gated RMSNorm per token and head with one weight shared by the heads.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_op_helpers.h"

namespace rill::testing {
namespace {

// fp32 vs fp64: a mean of squares, a rsqrt and two or three products per element, no cancellation: a few
// fp32 ulps relative, bounded at 1e-5.
constexpr double kTol = 1e-5, kFloor = 1e-30;

// Rows of N(0, 3) values, every fourth scaled by 1e-3 so that its mean square (~1e-5) is comparable to eps.
std::vector<float> rows_with_small_ones(OpHarness& h, int64_t T, int64_t width) {
  std::vector<float> x = h.randn(T * width, 3.0f, false);
  for (int64_t t = 3; t < T; t += 4)
    for (int64_t i = 0; i < width; ++i) x[size_t(t * width + i)] *= 1e-3f;
  return x;
}

// w * x / sqrt(mean(x^2) + eps) for the N values of each row starting at column `col` of a [T, width] buffer.
std::vector<double> rms_norm_reference(const std::vector<float>& x, int64_t T, int64_t width, int64_t col,
                                       int64_t N, const std::vector<float>& w, double eps) {
  std::vector<double> y(size_t(T * N));
  for (int64_t t = 0; t < T; ++t) {
    const float* r = &x[size_t(t * width + col)];
    double ms = 0;
    for (int64_t i = 0; i < N; ++i) ms += double(r[i]) * r[i];
    ms /= double(N);
    for (int64_t i = 0; i < N; ++i) y[size_t(t * N + i)] = double(w[size_t(i)]) * r[i] / std::sqrt(ms + eps);
  }
  return y;
}

TEST(NormCpu, RmsNormIsTheClosedForm) {
  OpHarness h(kCpuOnly);
  for (int64_t N : {64, 100, 512, 2304, 7168})
    for (int64_t T : {1, 7, 64})
      for (bool strided : {false, true})
        for (float eps : {1e-5f, 1e-6f}) {
          SCOPED_TRACE(::testing::Message()
                       << "N " << N << " T " << T << (strided ? " strided" : "") << " eps " << eps);
          const int64_t width = strided ? N + 24 : N, col = width - N;  // rows of a wider buffer
          const std::vector<float> x = rows_with_small_ones(h, T, width), w = h.uniform(N, 0.5f, 1.5f, false);
          const BackendTensor x_t = h.put(h.cpu(), x, DType::F32, {T, width});
          const BackendTensor w_t = h.put(h.cpu(), w, DType::F32, {N}),
                              y = h.empty(h.cpu(), DType::F32, {T, N});
          ASSERT_TRUE(h.cpu().rms_norm({x_t.view.narrow(1, col, N), w_t.view, eps, y.view}).ok());
          EXPECT_TRUE(elementwise_near(h.get(h.cpu(), y.view),
                                       rms_norm_reference(x, T, width, col, N, w, eps), kTol, kFloor));
        }
}

// The latent MoE normalises its output buffer in place.
TEST(NormCpu, RmsNormInPlace) {
  OpHarness h(kCpuOnly);
  const int64_t T = 9, N = 512;
  const std::vector<float> x = rows_with_small_ones(h, T, N), w = h.uniform(N, 0.5f, 1.5f, false);
  const BackendTensor x_t = h.put(h.cpu(), x, DType::F32, {T, N}), w_t = h.put(h.cpu(), w, DType::F32, {N});
  ASSERT_TRUE(h.cpu().rms_norm({x_t.view, w_t.view, 1e-6f, x_t.view}).ok());
  EXPECT_TRUE(
      elementwise_near(h.get(h.cpu(), x_t.view), rms_norm_reference(x, T, N, 0, N, w, 1e-6), kTol, kFloor));
}

// residual += delta in fp32, i.e. the correctly rounded sum, which float(double(r) + double(d)) is (rounding
// through fp64 first is innocuous for one operation: 53 >= 2 * 24 + 2); then out = RmsNorm(residual).
TEST(NormCpu, AddRmsNormUpdatesTheFp32ResidualThenNormalises) {
  OpHarness h(kCpuOnly);
  for (int64_t N : {64, 100, 2304, 7168})
    for (int64_t T : {1, 7, 64}) {
      SCOPED_TRACE(::testing::Message() << "N " << N << " T " << T);
      const std::vector<float> r = h.randn(T * N, 2.0f, false), d = rows_with_small_ones(h, T, N),
                               w = h.uniform(N, 0.5f, 1.5f, false);
      const BackendTensor r_t = h.put(h.cpu(), r, DType::F32, {T, N}),
                          d_t = h.put(h.cpu(), d, DType::F32, {T, N}),
                          w_t = h.put(h.cpu(), w, DType::F32, {N}), y = h.empty(h.cpu(), DType::F32, {T, N});
      ASSERT_TRUE(h.cpu().add_rms_norm({r_t.view, d_t.view, w_t.view, 1e-5f, y.view}).ok());
      std::vector<float> sum(r.size());
      for (size_t i = 0; i < r.size(); ++i) sum[i] = float(double(r[i]) + double(d[i]));
      EXPECT_EQ(h.get(h.cpu(), r_t.view), sum) << "residual";
      EXPECT_TRUE(elementwise_near(h.get(h.cpu(), y.view), rms_norm_reference(sum, T, N, 0, N, w, 1e-5), kTol,
                                   kFloor));
    }
}

// o may have a head stride wider than d (here: the first half of [T, Hk, 2d]).
TEST(NormCpu, KdaOutputIsTheGatedRmsNormPerHead) {
  OpHarness h(kCpuOnly);
  struct Case {
    int64_t T, Hk, d;
    bool strided;
  };
  for (const Case& c : {Case{1, 2, 128, false}, Case{7, 32, 128, false}, Case{64, 4, 128, true},
                        Case{5, 3, 64, true}, Case{4, 2, 36, false}}) {
    SCOPED_TRACE(::testing::Message()
                 << "T " << c.T << " Hk " << c.Hk << " d " << c.d << (c.strided ? " strided" : ""));
    const int64_t dw = c.strided ? 2 * c.d : c.d, P = c.Hk * c.d;
    std::vector<float> o = h.randn(c.T * c.Hk * dw, 0.5f, false);
    for (int64_t i = 0; i < c.d; ++i) o[size_t(i)] *= 1e-3f;  // token 0, head 0: eps matters
    const std::vector<float> gate = h.randn(c.T * P, 2.0f, false), w = h.uniform(c.d, 0.5f, 1.5f, false);
    const BackendTensor o_t = h.put(h.cpu(), o, DType::F32, {c.T, c.Hk, dw}),
                        gate_t = h.put(h.cpu(), gate, DType::F32, {c.T, P}),
                        w_t = h.put(h.cpu(), w, DType::F32, {c.d}),
                        y = h.empty(h.cpu(), DType::F32, {c.T, P});
    ASSERT_TRUE(h.cpu().kda_output({o_t.view.narrow(2, 0, c.d), gate_t.view, w_t.view, 1e-5f, y.view}).ok());
    std::vector<double> want(size_t(c.T * P));
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t hh = 0; hh < c.Hk; ++hh) {
        const float* x = &o[size_t((t * c.Hk + hh) * dw)];
        double ms = 0;
        for (int64_t i = 0; i < c.d; ++i) ms += double(x[i]) * x[i];
        ms /= double(c.d);
        for (int64_t i = 0; i < c.d; ++i) {
          const size_t j = size_t(t * P + hh * c.d + i);
          want[j] = double(x[i]) / std::sqrt(ms + 1e-5) * w[size_t(i)] * sigmoid(gate[j]);
        }
      }
    EXPECT_TRUE(elementwise_near(h.get(h.cpu(), y.view), want, kTol, kFloor));
  }
}

}  // namespace
}  // namespace rill::testing
