// The blocked inverse of the KDA chunk kernel's tensor-core solve (src/backend/cuda/kda/intra_inverse.h), on
// the host: the kernel's steps in its order (chunk_intra.cu invert_unit_lower) over chunk-shaped L, with
// everything on and above L's diagonal poisoned (NaN: the steps must never read it), against a
// double-precision forward substitution — the inverse itself, and the solve it feeds, [W | U] = T RHS.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/kda/intra_inverse.h"
#include "test_seed.h"

namespace rill::cuda::kda {
namespace {

constexpr int kN = 64, kLd = 68, kD = 128;  // a chunk's rows, chunk_intra.cu's kLdL, the head dim

// L as the chunk kernel builds it (spec §3.3): L[i][j] = β_i Σ_c k̂_i[c] k̂_j[c] 2^(Γ_i[c] − Γ_j[c]) for
// j < i, with unit k̂ (a shared direction of weight `shared` makes the keys correlated, as real keys are), β
// in (0.05, 1) and per-channel log2-decays of up to `rate` a token; NaN on and above the diagonal.
std::vector<float> chunk_L(std::mt19937& rng, double shared, double rate) {
  std::normal_distribution<double> n01(0.0, 1.0);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::vector<double> common(kD), k(size_t(kN) * kD), G(size_t(kN) * kD), beta(kN);
  for (double& c : common) c = n01(rng);
  for (int i = 0; i < kN; ++i) {
    double norm = 0.0;
    for (int c = 0; c < kD; ++c) {
      const double v = shared * common[size_t(c)] + (1.0 - shared) * n01(rng);
      k[size_t(i) * kD + c] = v;
      norm += v * v;
    }
    for (int c = 0; c < kD; ++c) {
      k[size_t(i) * kD + c] /= std::sqrt(norm);
      const double prev = i == 0 ? 0.0 : G[size_t(i - 1) * kD + c];
      G[size_t(i) * kD + c] = prev - rate * u01(rng);
    }
    beta[size_t(i)] = 0.05 + 0.95 * u01(rng);
  }
  std::vector<float> L(size_t(kN) * kLd, std::numeric_limits<float>::quiet_NaN());
  for (int i = 0; i < kN; ++i)
    for (int j = 0; j < i; ++j) {
      double s = 0.0;
      for (int c = 0; c < kD; ++c)
        s += k[size_t(i) * kD + c] * k[size_t(j) * kD + c] *
             std::exp2(G[size_t(i) * kD + c] - G[size_t(j) * kD + c]);
      L[size_t(i) * kLd + j] = float(beta[size_t(i)] * s);
    }
  return L;
}

// The kernel's order: every diagonal block's columns, then their write-back; per block row all of M, then all
// of T (the barriers between are the loops' ends here).
void invert_like_the_kernel(std::vector<float>& L) {
  float x[kN][kInvBlock];  // a thread per diagonal-block column: tid = block * 16 + column
  for (int t = 0; t < kN; ++t)
    inverse_diagonal_column(L.data(), kLd, (t / kInvBlock) * kInvBlock, t % kInvBlock, x[t]);
  for (int t = 0; t < kN; ++t) {
    const int b0 = (t / kInvBlock) * kInvBlock, c = t % kInvBlock;
    for (int r = c + 1; r < kInvBlock; ++r) L[size_t(b0 + r) * kLd + b0 + c] = x[t][r];
  }
  constexpr int kLdM = kN - kInvBlock;
  std::vector<float> M(size_t(kInvBlock) * kLdM, std::numeric_limits<float>::quiet_NaN());
  for (int i0 = kInvBlock; i0 < kN; i0 += kInvBlock) {
    for (int e = 0; e < kInvBlock * i0; ++e)
      M[size_t(e / i0) * kLdM + e % i0] = inverse_block_product(L.data(), kLd, i0, e / i0, e % i0);
    for (int e = 0; e < kInvBlock * i0; ++e)
      L[size_t(i0 + e / i0) * kLd + e % i0] =
          inverse_block_entry(L.data(), kLd, i0, e / i0, e % i0, M.data(), kLdM);
  }
}

// (I + L) X = B by forward substitution in double, B [kN x cols] row-major.
std::vector<double> substitute(const std::vector<float>& L, const std::vector<double>& B, int cols) {
  std::vector<double> X = B;
  for (int i = 1; i < kN; ++i)
    for (int j = 0; j < i; ++j)
      for (int c = 0; c < cols; ++c)
        X[size_t(i) * cols + c] -= double(L[size_t(i) * kLd + j]) * X[size_t(j) * cols + c];
  return X;
}

double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

struct Case {
  double shared, rate;
};

TEST(KdaIntraInverse, MatchesTheDoubleInverseAndSolve) {
  const uint32_t seed = rill::testing::test_seed();  // RILL_TEST_SEED replays
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // Independent keys, correlated keys (L near β), no decay and steep decays (K3's bounded gate: < 7.3 log2 a
  // token; Kimi Linear's can be steeper, where L's entries vanish).
  for (const Case cs :
       {Case{0.0, 0.3}, Case{0.7, 0.0}, Case{0.9, 0.05}, Case{0.5, 2.0}, Case{0.95, 0.0}, Case{0.3, 7.0}}) {
    for (int round = 0; round < 4; ++round) {
      SCOPED_TRACE(::testing::Message()
                   << "shared " << cs.shared << " rate " << cs.rate << " round " << round);
      const std::vector<float> L = chunk_L(rng, cs.shared, cs.rate);
      std::vector<float> T = L;
      invert_like_the_kernel(T);
      // The inverse: column by column, (I + L)^-1 e_j in double.
      std::vector<double> I(size_t(kN) * kN, 0.0);
      for (int i = 0; i < kN; ++i) I[size_t(i) * kN + i] = 1.0;
      const std::vector<double> want = substitute(L, I, kN);
      std::vector<double> got(size_t(kN) * kN, 0.0);
      for (int i = 0; i < kN; ++i)
        for (int j = 0; j < kN; ++j) {
          const float t = T[size_t(i) * kLd + j];
          if (j < i) {
            ASSERT_TRUE(std::isfinite(t)) << "T[" << i << "][" << j << "]";
            got[size_t(i) * kN + j] = t;
          } else {
            ASSERT_TRUE(std::isnan(t)) << "written on or above the diagonal: [" << i << "][" << j << "]";
            got[size_t(i) * kN + j] = i == j ? 1.0 : 0.0;
          }
        }
      EXPECT_LE(rel_l2(got, want), 1e-5);
      // The solve it feeds: T RHS against substitution, for the W and U right-hand sides' magnitudes.
      std::normal_distribution<double> n01(0.0, 1.0);
      std::vector<double> rhs(size_t(kN) * 2 * kD);
      for (double& v : rhs) v = n01(rng);
      const std::vector<double> x_want = substitute(L, rhs, 2 * kD);
      std::vector<double> x_got(rhs.size(), 0.0);
      for (int i = 0; i < kN; ++i)
        for (int j = 0; j <= i; ++j)
          for (int c = 0; c < 2 * kD; ++c)
            x_got[size_t(i) * 2 * kD + c] += got[size_t(i) * kN + j] * rhs[size_t(j) * 2 * kD + c];
      EXPECT_LE(rel_l2(x_got, x_want), 1e-5);
    }
  }
}

}  // namespace
}  // namespace rill::cuda::kda
