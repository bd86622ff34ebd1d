// Sampling penalties, grammar masks, non-finite row checks and logprobs on the GPU (backend.h PenaltyArgs /
// TokenMaskArgs / NonfiniteRowsArgs / LogprobsArgs), matching the CpuBackend's *_impl of each.
#include <cfloat>

#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/sample.h"

namespace rill::cuda {
namespace {

__global__ void penalties_kernel(float* logits, int64_t row_stride, int V, const int32_t* offsets,
                                 const int32_t* tokens, const int32_t* counts, const float* params) {
  const int r = blockIdx.x;
  const float presence = params[3 * r], frequency = params[3 * r + 1], repetition = params[3 * r + 2];
  float* l = logits + int64_t(r) * row_stride;
  // Tokens of a row are distinct, so threads never touch the same logit.
  for (int i = offsets[r] + threadIdx.x; i < offsets[r + 1]; i += blockDim.x) {
    const int t = tokens[i];
    if (t < 0 || t >= V) continue;
    float x = l[t];
    if (repetition != 1.0f) x = x > 0 ? x / repetition : x * repetition;
    const int n = counts[i];
    l[t] = x - (frequency * float(n) + (n > 0 ? presence : 0.0f));
  }
}

// One thread per logit: -inf where the row's mask bit is clear.
__global__ void mask_logits_kernel(float* logits, int64_t row_stride, int V, const uint32_t* mask,
                                   int64_t words_per_row) {
  const int r = blockIdx.y;
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= V) return;
  if (!((mask[r * words_per_row + t / 32] >> (t % 32)) & 1u)) logits[r * row_stride + t] = -INFINITY;
}

// Block-wide (max value, lowest index) reduction; every thread gets the result.
__device__ void block_argmax(float& v, int& i) {
  __shared__ float sv[32];
  __shared__ int si[32];
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (ov > v || (ov == v && oi < i)) v = ov, i = oi;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) sv[warp] = v, si[warp] = i;
  __syncthreads();
  v = lane < n_warps ? sv[lane] : -FLT_MAX;
  i = lane < n_warps ? si[lane] : INT_MAX;
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (ov > v || (ov == v && oi < i)) v = ov, i = oi;
  }
}

__global__ void logprobs_kernel(const float* logits, int64_t row_stride, int V, const int32_t* sampled, int top_n,
                                float* out_logprob, int32_t* top_ids, int64_t ids_stride, float* top_lp,
                                int64_t lp_stride) {
  const int r = blockIdx.x;
  const float* l = logits + int64_t(r) * row_stride;
  float mx = -FLT_MAX;
  int mi = INT_MAX;
  for (int v = threadIdx.x; v < V; v += blockDim.x)
    if (l[v] > mx) mx = l[v], mi = v;
  block_argmax(mx, mi);
  float s = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) s += __expf(l[v] - mx);
  s = block_sum(s);
  const float lse = mx + logf(s);
  if (threadIdx.x == 0) {
    const int t = sampled[r];
    out_logprob[r] = (t >= 0 && t < V) ? l[t] - lse : -INFINITY;
  }
  // top_n (<= 20) by repeated block argmax, each pass excluding what earlier passes took.
  float prev_v = FLT_MAX;
  int prev_i = -1;
  for (int k = 0; k < top_n; ++k) {
    float bv = -FLT_MAX;
    int bi = INT_MAX;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
      const float x = l[v];
      const bool after_prev = x < prev_v || (x == prev_v && v > prev_i);  // strictly after in (value desc, id asc)
      if (after_prev && (x > bv || (x == bv && v < bi))) bv = x, bi = v;
    }
    block_argmax(bv, bi);
    if (threadIdx.x == 0) {
      top_ids[int64_t(r) * ids_stride + k] = bi;
      top_lp[int64_t(r) * lp_stride + k] = bv - lse;
    }
    prev_v = bv;
    prev_i = bi;
  }
}

}  // namespace

Status launch_apply_penalties(const backend::PenaltyArgs& a, const CudaContext& cx) {
  const int R = int(a.logits.size(0));
  if (R == 0) return {};
  penalties_kernel<<<R, 256, 0, cx.stream>>>(a.logits.ptr<float>(), a.logits.stride(0), int(a.logits.size(1)),
                                             a.row_offsets, a.tokens, a.output_counts, a.penalties);
  RILL_CUDA_CHECK_LAUNCH("penalties_kernel");
  return {};
}

Status launch_mask_logits(const backend::TokenMaskArgs& a, const CudaContext& cx) {
  const int R = int(a.logits.size(0)), V = int(a.logits.size(1));
  if (R == 0 || V == 0) return {};
  mask_logits_kernel<<<dim3(unsigned(V + 255) / 256, unsigned(R)), 256, 0, cx.stream>>>(
      a.logits.ptr<float>(), a.logits.stride(0), V, a.mask, a.words_per_row);
  RILL_CUDA_CHECK_LAUNCH("mask_logits_kernel");
  return {};
}

// One block per row: any thread that sees a NaN or infinity sets the row's flag (written every time, so the
// output needs no clearing).
__global__ void nonfinite_rows_kernel(const float* logits, int64_t row_stride, int V, int32_t* out) {
  const int r = blockIdx.x;
  const float* row = logits + r * row_stride;
  int bad = 0;
  for (int t = threadIdx.x; t < V && !bad; t += blockDim.x) bad = !isfinite(row[t]);
  bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) out[r] = bad ? 1 : 0;
}

Status launch_nonfinite_rows(const backend::NonfiniteRowsArgs& a, const CudaContext& cx) {
  const int R = int(a.logits.size(0)), V = int(a.logits.size(1));
  if (R == 0) return {};
  nonfinite_rows_kernel<<<R, 256, 0, cx.stream>>>(a.logits.ptr<float>(), a.logits.stride(0), V,
                                                  a.out.ptr<int32_t>());
  RILL_CUDA_CHECK_LAUNCH("nonfinite_rows_kernel");
  return {};
}

Status launch_logprobs(const backend::LogprobsArgs& a, const CudaContext& cx) {
  const int R = int(a.logits.size(0));
  if (R == 0) return {};
  logprobs_kernel<<<R, 512, 0, cx.stream>>>(
      a.logits.ptr<float>(), a.logits.stride(0), int(a.logits.size(1)), a.sampled.ptr<int32_t>(), a.top_n,
      a.out_logprob.ptr<float>(), a.top_n ? a.out_top_ids.ptr<int32_t>() : nullptr, a.top_n ? a.out_top_ids.stride(0) : 0,
      a.top_n ? a.out_top_logprobs.ptr<float>() : nullptr, a.top_n ? a.out_top_logprobs.stride(0) : 0);
  RILL_CUDA_CHECK_LAUNCH("logprobs_kernel");
  return {};
}

}  // namespace rill::cuda
