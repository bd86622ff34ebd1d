// K3 Block Attention Residuals depth mix (spec §3.11), the CPU reference's numerics
// (backend/cpu/attn_res.cc): per token t, over the N candidates V_j ([N, T, H], fp32 or bf16: block
// snapshots, then the partial sum),
//   z_j = (1 / sqrt(mean_c V_j[c]^2 + eps)) * sum_c V_j[c] * (norm[c] * proj[c]),
//   p = softmax_j(z) (max-subtracted, expf, sum in order j = 0..N-1),
//   out[t] = sum_j p_j * V_j, accumulated in fp32 in order j (rounded once when out is bf16).
// One block per token row. Pass one reads each candidate row once, computing its sum of squares and its dot
// with the pseudo-query together (two fp32 block reductions per candidate; the CPU sums the squares in fp64,
// a difference far below the output's bf16 rounding). Thread 0 then takes the softmax over the N logits in
// shared memory. Pass two re-reads the candidates for the weighted sum: a first version; the rows were just
// read by this block and mostly hit L2 (N * H * 4 bytes per token in fp32, ~258 KB at K3's N = 9, H = 7168).
// 16-byte accesses when H, the strides and the pointers allow.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/attn_res.h"
#include "backend/cuda/common/align.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"

namespace rill::cuda {
namespace {

using bf16 = __nv_bfloat16;

// The logits, then the probabilities, live in a fixed shared array of kAttnResMaxCandidates: with a dynamic
// one sized N, compute-sanitizer flagged 12-byte reads at its end from the weighted-sum loop (the compiler's
// vectorised loads of prob[j..]); the padding keeps any such read inside the array.
constexpr int kMaxCandidates = kAttnResMaxCandidates;

// grid (T).
template <int kVec, typename V, typename O>
__global__ void attn_res_mix_kernel(const V* v, int64_t ld_n, int64_t ld_t, const float* norm,
                                    const float* proj, float eps, O* out, int64_t ldo, int N, int H) {
  pdl_prologue();
  __shared__ float prob[kMaxCandidates + 4];  // [N] used
  const int64_t t = blockIdx.x;
  for (int j = 0; j < N; ++j) {
    const V* vr = v + int64_t(j) * ld_n + t * ld_t;
    float ss = 0.0f, dot = 0.0f;
    for (int c = threadIdx.x * kVec; c < H; c += blockDim.x * kVec) {
      float x[kVec];
      load_row<kVec>(vr + c, x);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        ss += x[i] * x[i];
        dot += x[i] * __fmul_rn(norm[c + i], proj[c + i]);  // the pseudo-query, as the CPU folds it
      }
    }
    ss = block_sum(ss);
    dot = block_sum(dot);
    if (threadIdx.x == 0) prob[j] = (1.0f / sqrtf(ss / float(H) + eps)) * dot;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float zmax = -INFINITY;
    for (int j = 0; j < N; ++j) zmax = fmaxf(zmax, prob[j]);
    float sum = 0.0f;
    for (int j = 0; j < N; ++j) sum += (prob[j] = expf(prob[j] - zmax));
    for (int j = 0; j < N; ++j) prob[j] = prob[j] / sum;
  }
  __syncthreads();
  for (int c = threadIdx.x * kVec; c < H; c += blockDim.x * kVec) {
    float acc[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[i] = 0.0f;
    for (int j = 0; j < N; ++j) {
      const float pj = prob[j];
      float x[kVec];
      load_row<kVec>(v + int64_t(j) * ld_n + t * ld_t + c, x);
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[i] += pj * x[i];
    }
    store_row<kVec>(out + t * ldo + c, acc);
  }
}

// Threads per row block: enough for one vector each on narrow rows, at most 256.
int row_threads(int64_t H, int vec) {
  const int64_t per = (H + vec - 1) / vec;
  return int(std::clamp<int64_t>((per + 31) / 32 * 32, 32, 256));
}

template <typename V, typename O>
Status launch_mix(const backend::AttnResMixArgs& a, const CudaContext& cx) {
  const int64_t N = a.candidates.size(0), T = a.candidates.size(1), H = a.candidates.size(2);
  const auto* v = static_cast<const V*>(a.candidates.data);
  const int64_t ld_n = a.candidates.stride(0), ld_t = a.candidates.stride(1);
  const float* norm = a.norm_weight.ptr<const float>();
  const float* proj = a.proj_weight.ptr<const float>();
  auto* out = static_cast<O*>(a.out.data);
  const int64_t ldo = a.out.stride(0);
  const bool vec =
      H % 8 == 0 && ld_n % 8 == 0 && ld_t % 8 == 0 && ldo % 8 == 0 && aligned16(v) && aligned16(out);
  const int vw = vec ? 8 : 1;
  return launch("attn_res_mix", {dim3(unsigned(T)), dim3(row_threads(H, vw))}, cx.stream,
                vec ? attn_res_mix_kernel<8, V, O> : attn_res_mix_kernel<1, V, O>, v, ld_n, ld_t, norm, proj,
                a.eps, out, ldo, int(N), int(H));
}

}  // namespace

// Candidates and output in fp32 (the model's AttnRes state) or bf16, in any combination.
Status launch_attn_res_mix(const backend::AttnResMixArgs& a, const CudaContext& cx) {
  auto ok = [](DType t) { return t == DType::BF16 || t == DType::F32; };
  if (!ok(a.candidates.dtype) || !ok(a.out.dtype))
    return invalid_argument(
        "attn_res_mix: CUDA candidates and out must be BF16 or F32 (candidates {}, out {})",
        a.candidates.describe(), a.out.describe());
  const int64_t N = a.candidates.size(0), T = a.candidates.size(1), H = a.candidates.size(2);
  if (T == 0 || H == 0) return {};
  if (N > kMaxCandidates)
    return invalid_argument("attn_res_mix: {} candidates is more than the CUDA kernel's {}", N,
                            kMaxCandidates);
  const bool v32 = a.candidates.dtype == DType::F32, o32 = a.out.dtype == DType::F32;
  if (v32 && o32) return launch_mix<float, float>(a, cx);
  if (v32) return launch_mix<float, bf16>(a, cx);
  if (o32) return launch_mix<bf16, float>(a, cx);
  return launch_mix<bf16, bf16>(a, cx);
}

}  // namespace rill::cuda
