// The elementwise family on the CPU backend (src/backend/cpu/elementwise.cc) against closed forms in fp64:
// embed and gather_rows copy rows exactly (and refuse indices outside the table), add is the correctly
// rounded fp32 sum, glu is SiLU-GLU or SiTU-GLU (spec §3.6) with the soft caps of both betas reached,
// sigmoid_gate is x * sigmoid(g). Strided rows where the model passes them.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_op_helpers.h"

namespace rill::testing {
namespace {

// fp32 vs fp64 for an activation of libm exp/tanh and two or three products: a few fp32 ulps relative,
// bounded at 1e-5; silu(g) * u near g = 0 or u = 0 keeps that relative accuracy (no cancellation).
constexpr double kTol = 1e-5, kFloor = 1e-30;

std::vector<float> random_ids(OpHarness& h, int64_t n, int64_t hi) {
  std::uniform_int_distribution<int> d(0, int(hi) - 1);
  std::vector<float> ids(static_cast<size_t>(n));
  for (auto& v : ids) v = float(d(h.rng()));
  return ids;
}

TEST(ElementwiseCpu, EmbedCopiesTableRows) {
  OpHarness h(kCpuOnly);
  for (DType table_dtype : {DType::BF16, DType::F32})
    for (auto [V, H] : {std::pair<int64_t, int64_t>{512, 64}, {1000, 2304}, {300, 36}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(table_dtype) << " V " << V << " H " << H);
      const int64_t T = 40;
      const std::vector<float> table = h.randn(V * H);  // bf16-exact, so both dtypes hold these values
      std::vector<float> ids = random_ids(h, T, V);
      ids[0] = 0;
      ids[1] = float(V - 1);
      const BackendTensor table_t = h.put(h.cpu(), table, table_dtype, {V, H}),
                          ids_t = h.put(h.cpu(), ids, DType::I32, {T}),
                          y = h.empty(h.cpu(), DType::F32, {T, H});
      ASSERT_TRUE(h.cpu().embed({table_t.view, ids_t.view, y.view}).ok());
      const std::vector<float> got = h.get(h.cpu(), y.view);
      for (int64_t t = 0; t < T; ++t)
        ASSERT_EQ(slice(got, size_t(t * H), size_t(H)),
                  slice(table, size_t(ids[size_t(t)]) * size_t(H), size_t(H)))
            << "token " << t << " (id " << ids[size_t(t)] << ")";
    }
}

// The CPU sees the ids on the host, so an id outside the vocabulary is an error naming it (CUDA, which
// cannot, writes a zero row).
TEST(ElementwiseCpu, EmbedRefusesIdsOutsideTheVocabulary) {
  OpHarness h(kCpuOnly);
  const int64_t V = 100, H = 8;
  const BackendTensor table = h.put(h.cpu(), h.randn(V * H), DType::BF16, {V, H});
  for (int bad : {-1, 100, 1000000}) {
    const BackendTensor ids = h.put(h.cpu(), {3.0f, float(bad)}, DType::I32, {2}),
                        y = h.empty(h.cpu(), DType::F32, {2, H});
    const Status st = h.cpu().embed({table.view, ids.view, y.view});
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("token id " + std::to_string(bad)), std::string::npos) << st.message();
  }
}

// An fp32 running sum plus a sublayer output, on strided rows: the correctly rounded fp32 sum of each pair,
// which float(double(a) + double(b)) is (53 >= 2 * 24 + 2 makes the double rounding innocuous).
TEST(ElementwiseCpu, AddIsTheRoundedFp32Sum) {
  OpHarness h(kCpuOnly);
  for (auto [M, N] : {std::pair<int64_t, int64_t>{1, 64}, {7, 2304}, {300, 100}})
    for (bool strided : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "M " << M << " N " << N << (strided ? " strided" : ""));
      const int64_t width = strided ? N + 16 : N;
      const std::vector<float> a = h.randn(M * width, 1.0f, false), b = h.randn(M * width, 0.3f, false);
      const BackendTensor a_t = h.put(h.cpu(), a, DType::F32, {M, width}),
                          b_t = h.put(h.cpu(), b, DType::F32, {M, width});
      ASSERT_TRUE(h.cpu().add({a_t.view.narrow(1, 0, N), b_t.view.narrow(1, width - N, N)}).ok());
      std::vector<float> want(a);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n)
          want[size_t(m * width + n)] =
              float(double(a[size_t(m * width + n)]) + b[size_t(m * width + width - N + n)]);
      EXPECT_EQ(h.get(h.cpu(), a_t.view), want) << "sums, and the columns outside the view untouched";
    }
}

TEST(ElementwiseCpu, SigmoidGate) {
  OpHarness h(kCpuOnly);
  for (auto [M, N] : {std::pair<int64_t, int64_t>{1, 64}, {7, 4096}, {300, 100}}) {
    SCOPED_TRACE(::testing::Message() << "M " << M << " N " << N);
    const std::vector<float> x = h.randn(M * N, 1.0f, false), g = h.randn(M * N, 4.0f, false);
    const BackendTensor x_t = h.put(h.cpu(), x, DType::F32, {M, N}),
                        g_t = h.put(h.cpu(), g, DType::F32, {M, N});
    ASSERT_TRUE(h.cpu().sigmoid_gate({x_t.view, g_t.view}).ok());
    std::vector<double> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = double(x[i]) * sigmoid(g[i]);
    EXPECT_TRUE(elementwise_near(h.get(h.cpu(), x_t.view), want, kTol, kFloor));
  }
}

struct GluCase {
  backend::Activation act;
  float beta, linear_beta;  // SiTU only
  float gate_scale, up_scale;
};

// gate and up are the two halves of one [M, 2I] buffer, as the MLP passes them.
TEST(ElementwiseCpu, GluSiluAndSitu) {
  OpHarness h(kCpuOnly);
  using backend::Activation;
  // K3's betas (4, 25) with inputs past both soft caps, and other betas so that each one's place shows.
  for (const GluCase& c :
       {GluCase{Activation::Silu, 0, 0, 3.0f, 2.0f}, GluCase{Activation::Situ, 4, 25, 8.0f, 40.0f},
        GluCase{Activation::Situ, 1.5f, 3.0f, 4.0f, 6.0f}})
    for (auto [M, I] : {std::pair<int64_t, int64_t>{1, 32}, {7, 1024}, {64, 9216}, {5, 30}}) {
      SCOPED_TRACE(::testing::Message() << (c.act == Activation::Silu ? "silu" : "situ") << " betas "
                                        << c.beta << "/" << c.linear_beta << " M " << M << " I " << I);
      std::vector<float> gu = h.randn(M * 2 * I, 1.0f, false);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t i = 0; i < 2 * I; ++i) gu[size_t(m * 2 * I + i)] *= i < I ? c.gate_scale : c.up_scale;
      const BackendTensor gu_t = h.put(h.cpu(), gu, DType::F32, {M, 2 * I}),
                          y = h.empty(h.cpu(), DType::F32, {M, I});
      ASSERT_TRUE(h.cpu()
                      .glu({gu_t.view.narrow(1, 0, I), gu_t.view.narrow(1, I, I), y.view, c.act, c.beta,
                            c.linear_beta})
                      .ok());
      std::vector<double> want(size_t(M * I));
      for (int64_t m = 0; m < M; ++m)
        for (int64_t i = 0; i < I; ++i) {
          const double g = gu[size_t(m * 2 * I + i)], u = gu[size_t(m * 2 * I + I + i)];
          want[size_t(m * I + i)] = c.act == Activation::Silu
                                        ? g * sigmoid(g) * u
                                        : c.beta * std::tanh(g / c.beta) * sigmoid(g) *
                                              (c.linear_beta * std::tanh(u / c.linear_beta));
        }
      EXPECT_TRUE(elementwise_near(h.get(h.cpu(), y.view), want, kTol, kFloor));
    }
  // SiTU without its betas is refused rather than computed with a zero cap.
  const BackendTensor x = h.put(h.cpu(), h.randn(8), DType::F32, {2, 4}),
                      y = h.empty(h.cpu(), DType::F32, {2, 4});
  EXPECT_FALSE(h.cpu().glu({x.view, x.view, y.view, Activation::Situ, 4.0f, 0.0f}).ok());
}

TEST(ElementwiseCpu, GatherRowsCopiesRows) {
  OpHarness h(kCpuOnly);
  struct Case {
    DType dtype;
    int64_t T, N, R;
    bool strided;
  };
  for (const Case& c : {Case{DType::BF16, 50, 2304, 7, false}, Case{DType::F32, 300, 64, 300, true},
                        Case{DType::F32, 9, 3, 20, false}, Case{DType::BF16, 9, 3, 5, true}}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(c.dtype) << " T " << c.T << " N " << c.N << " R " << c.R
                                      << (c.strided ? " strided" : ""));
    const int64_t width = c.strided ? 2 * c.N : c.N, col = width - c.N;
    const std::vector<float> x = h.randn(c.T * width);  // bf16-exact
    const std::vector<float> rows = random_ids(h, c.R, c.T);
    const BackendTensor x_t = h.put(h.cpu(), x, c.dtype, {c.T, width}),
                        rows_t = h.put(h.cpu(), rows, DType::I32, {c.R}),
                        y = h.empty(h.cpu(), c.dtype, {c.R, c.N});
    ASSERT_TRUE(h.cpu().gather_rows({x_t.view.narrow(1, col, c.N), rows_t.view, y.view}).ok());
    const std::vector<float> got = h.get(h.cpu(), y.view);
    for (int64_t r = 0; r < c.R; ++r)
      ASSERT_EQ(slice(got, size_t(r * c.N), size_t(c.N)),
                slice(x, size_t(rows[size_t(r)]) * size_t(width) + size_t(col), size_t(c.N)))
          << "row " << r << " (source " << rows[size_t(r)] << ")";
  }
  const BackendTensor x = h.put(h.cpu(), h.randn(12), DType::F32, {3, 4}),
                      bad = h.put(h.cpu(), {0.0f, 3.0f}, DType::I32, {2}),
                      y = h.empty(h.cpu(), DType::F32, {2, 4});
  const Status st = h.cpu().gather_rows({x.view, bad.view, y.view});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("row 3 outside [0, 3)"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace rill::testing
