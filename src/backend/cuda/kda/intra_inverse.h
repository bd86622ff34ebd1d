// The blocked inverse of a chunk's unit lower-triangular (I + L) that the chunk kernel's tensor-core solve
// computes (chunk_intra.cu solve_tensor, backend option kda_intra_tensor_solve), as functions of one output
// element over a row-major fp32 matrix, host and device. No CUDA headers: the kernel calls them from its
// thread loops between barriers, and the CPU test (tests/backend/cpu/kda_intra_inverse_test.cc) calls them in
// the same order against a double-precision inverse.
//
// T = (I + L)^-1 is written over L in place, strictly lower part only (the unit diagonal and the zeros above
// it stay implicit, and nothing on or above L's diagonal is ever read). In blocks of kInvBlock rows:
//  1. each diagonal block T_bb = (I + L_bb)^-1 by forward substitution, a column at a time (all columns are
//     computed before any is written back);
//  2. block row i = 1, 2, ...: M = sum over k in [16 j, 16 i) of L[i rows][k] T[k][columns < 16 i] (from the
//     rows above, already T), then T[i rows][those columns] = -T_ii M (all of M before any T is written).
#pragma once

#include <math.h>

#if defined(__CUDACC__)
#define RILL_KDA_HD __host__ __device__
#else
#define RILL_KDA_HD
#endif
#if defined(__CUDA_ARCH__)
#define RILL_KDA_UNROLL _Pragma("unroll")
#else
#define RILL_KDA_UNROLL
#endif

namespace rill::cuda::kda {

constexpr int kInvBlock = 16;

// Column c of T_bb, the inverse of the diagonal block starting at row b0: x[r] = T[b0 + r][b0 + c].
RILL_KDA_HD inline void inverse_diagonal_column(const float* L, int ld, int b0, int c,
                                                float (&x)[kInvBlock]) {
  RILL_KDA_UNROLL
  for (int r = 0; r < kInvBlock; ++r) {
    float v = r == c ? 1.0f : 0.0f;
    RILL_KDA_UNROLL
    for (int s = 0; s < r; ++s) v = fmaf(-L[(b0 + r) * ld + b0 + s], x[s], v);  // (x[s] = 0 for s < c)
    x[r] = r < c ? 0.0f : v;
  }
}

// M[r][cc] of block row i0 (a multiple of kInvBlock): sum over k in [cc, i0) of L[i0 + r][k] T[k][cc], with
// T[cc][cc] = 1 and T[k][cc] for k > cc already written over L.
RILL_KDA_HD inline float inverse_block_product(const float* L, int ld, int i0, int r, int cc) {
  const float* Lr = L + (i0 + r) * ld;
  float acc = Lr[cc];
  for (int k = cc + 1; k < i0; ++k) acc = fmaf(Lr[k], L[k * ld + cc], acc);
  return acc;
}

// T[i0 + r][cc] = -(T_ii M)[r][cc] = -(M[r][cc] + sum over s < r of T[i0 + r][i0 + s] M[s][cc]), M with row
// stride ldm.
RILL_KDA_HD inline float inverse_block_entry(const float* L, int ld, int i0, int r, int cc, const float* M,
                                             int ldm) {
  const float* Tr = L + (i0 + r) * ld + i0;
  float acc = M[r * ldm + cc];
  for (int s = 0; s < r; ++s) acc = fmaf(Tr[s], M[s * ldm + cc], acc);
  return -acc;
}

}  // namespace rill::cuda::kda
