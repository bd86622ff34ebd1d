// kda_fold: speculative decoding's replay records committed (kda_rollback "records"). One CTA per (fold,
// head): every state element of the head is folded through the first n_tokens records in order,
// S = fmaf(alpha_c, S, (beta k̂)_c e_j) — the expression recurrent_math.cuh's step_update stores, on the same
// floats, so the committed state is bit for bit the one the verify step held after that token — and the
// head's q, k and v channels of the conv window move on to the last K-1 rows of [window | the step's inputs].
// Elements are independent, so no shared memory and no barrier; a fold with n_tokens 0, or one whose slot or
// count lies outside the records (the backend cannot check device arrays on the host), leaves its slot alone.
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kda/config.h"
#include "backend/cuda/kda/device.cuh"
#include "backend/cuda/kda/phases.h"

namespace rill::cuda::kda {
namespace {

constexpr int kFoldThreads = 256;
constexpr int kHist = kConvTaps - 1;  // window rows

__global__ void __launch_bounds__(kFoldThreads) kda_fold_kernel(const FoldParams p) {
  pdl_prologue();
  const int i = int(blockIdx.x) / p.n_heads, h = int(blockIdx.x) % p.n_heads;
  const int slot = p.slots[i], a = p.n_tokens[i];
  if (a <= 0 || a > p.max_tokens || slot < 0 || slot >= p.n_record_slots) return;
  const int tid = int(threadIdx.x);

  const float* rec = p.records + int64_t(slot) * p.ld_rec_slot + int64_t(h) * 3 * kHeadDim;
  float* S = p.state + int64_t(slot) * p.ld_state_slot + int64_t(h) * p.ld_state_head;
  constexpr int kVecs = kHeadDim * kHeadDim / 4;  // float4s of one head's state
  for (int x = tid; x < kVecs; x += kFoldThreads) {
    const int c = x / (kHeadDim / 4), j = (x % (kHeadDim / 4)) * 4;
    float4 s = *reinterpret_cast<const float4*>(S + c * kHeadDim + j);
    for (int t = 0; t < a; ++t) {
      const float* r = rec + int64_t(t) * p.ld_rec_token;
      const float bk = r[c], al = r[kHeadDim + c];
      const float4 e = *reinterpret_cast<const float4*>(r + 2 * kHeadDim + j);
      s = make_float4(fmaf(al, s.x, bk * e.x), fmaf(al, s.y, bk * e.y), fmaf(al, s.z, bk * e.z),
                      fmaf(al, s.w, bk * e.w));
    }
    *reinterpret_cast<float4*>(S + c * kHeadDim + j) = s;
  }

  // The head's channels of q, k and v (3 x d, 8 a thread): window row r becomes row a + r of [window | inputs].
  constexpr int kVecsConv = 3 * kHeadDim / kPrepVec;
  if (tid < kVecsConv) {
    const int which = tid / (kHeadDim / kPrepVec), off = (tid % (kHeadDim / kPrepVec)) * kPrepVec;
    const int64_t ch = int64_t(which) * p.proj + int64_t(h) * kHeadDim + off;
    bf16* win = p.conv_state + int64_t(slot) * p.ld_cs_slot + ch;
    const bf16* in = p.conv_records + int64_t(slot) * p.ld_cr_slot + ch;
    uint4 rows[kHist];  // all sources read before any row is written (the shift is in place)
#pragma unroll
    for (int r = 0; r < kHist; ++r) {
      const int src = a + r;
      rows[r] = src < kHist ? *reinterpret_cast<const uint4*>(win + int64_t(src) * p.ld_cs_row)
                            : *reinterpret_cast<const uint4*>(in + int64_t(src - kHist) * p.ld_cr_row);
    }
#pragma unroll
    for (int r = 0; r < kHist; ++r) *reinterpret_cast<uint4*>(win + int64_t(r) * p.ld_cs_row) = rows[r];
  }
}

}  // namespace

Status launch_fold(const FoldParams& p, cudaStream_t stream) {
  if (p.n_folds == 0 || p.n_heads == 0) return {};
  const int64_t blocks = int64_t(p.n_folds) * p.n_heads;
  if (blocks > 0x7fffffff) return invalid_argument("kda_fold (CUDA): {} CTAs exceed the grid", blocks);
  return launch("kda_fold", {dim3(unsigned(blocks)), dim3(kFoldThreads)}, stream, kda_fold_kernel, p);
}

}  // namespace rill::cuda::kda
