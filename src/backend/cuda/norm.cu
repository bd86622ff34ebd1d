// KimiRMSNorm, the fused residual add + RMSNorm, and KDA's gated output RMSNorm (spec §3.0).
//
// rms_norm / add_rms_norm: one block per row (rows may be strided), two passes over the row: the sum of
// squares (fp32, block reduction), then y = bf16(x * rsqrt(mean + eps)) and out = bf16(w * y). The second
// pass re-reads the row, which a block has just read (L1/L2 hit), so the kernel moves each byte once from
// HBM: memory-bound. 16-byte accesses when width, strides and pointers allow. The residual (x) is bf16 or
// fp32 (the model keeps its residual stream in fp32); in add_rms_norm it is updated (rounded to bf16 when
// bf16) and stored in pass one; each thread re-reads exactly the elements it wrote.
//
// kda_output_norm: one warp per (token, head) over d channels, all fp32, rounded once at the end.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/common/align.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/norm.h"
#include "backend/cuda/norm_row.cuh"

namespace rill::cuda {
namespace {

using bf16 = __nv_bfloat16;

// kAdd: x is the residual (updated in place with x + delta: rounded to bf16 when X is bf16, exact in fp32
// when the residual stream is fp32); otherwise delta is unused. The row steps are norm_row.cuh's, shared with
// the decode GEMV that folds add_rms_norm into its prologue.
template <int kVec, bool kAdd, typename X>
__global__ void rms_norm_kernel(X* x, int64_t ldx, const bf16* delta, int64_t ldd, const float* w, float eps,
                                bf16* out, int64_t ldo, int N) {
  pdl_prologue();
  const int64_t row = blockIdx.x;
  X* xr = x + row * ldx;
  const bf16* dr = delta + row * ldd;
  bf16* yr = out + row * ldo;
  float ss = 0.0f;
  for (int c = threadIdx.x * kVec; c < N; c += blockDim.x * kVec) {
    float v[kVec];
    load_residual<kVec, kAdd>(xr, dr, c, v);
    if constexpr (kAdd) store_row<kVec>(xr + c, v);
    add_squares<kVec>(v, ss);
  }
  ss = block_sum(ss);
  const float r = rms_scale(ss, N, eps);
  for (int c = threadIdx.x * kVec; c < N; c += blockDim.x * kVec) {
    float v[kVec];
    load_row<kVec>(xr + c, v);
    apply_norm<kVec>(v, w, c, r);
    store_bf16<kVec>(yr + c, v);
  }
}

// One warp per (token, head): y = o * rsqrt(mean(o^2) + eps) * w * sigmoid(gate), fp32, rounded once.
template <int kVec>
__global__ void kda_output_norm_kernel(const bf16* o, int64_t ld_t, int64_t ld_h, const bf16* gate,
                                       int64_t ldg, const float* w, float eps, bf16* out, int64_t ldo,
                                       int64_t n_rows, int n_heads, int d) {
  pdl_prologue();
  const int64_t item = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (item >= n_rows) return;
  const int lane = threadIdx.x & 31;
  const int64_t t = item / n_heads, h = item - t * n_heads;
  const bf16* x = o + t * ld_t + h * ld_h;
  const bf16* g = gate + t * ldg + h * d;
  bf16* y = out + t * ldo + h * d;
  float ss = 0.0f;
  for (int c = lane * kVec; c < d; c += 32 * kVec) {
    float v[kVec];
    load_bf16<kVec>(x + c, v);
#pragma unroll
    for (int i = 0; i < kVec; ++i) ss += v[i] * v[i];
  }
  ss = warp_sum(ss);
  const float r = rsqrtf(ss / float(d) + eps);
  for (int c = lane * kVec; c < d; c += 32 * kVec) {
    float v[kVec], gv[kVec];
    load_bf16<kVec>(x + c, v);
    load_bf16<kVec>(g + c, gv);
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = (v[i] * r) * w[c + i] * (1.0f / (1.0f + expf(-gv[i])));
    store_bf16<kVec>(y + c, v);
  }
}

Status check_bf16(const char* op, std::initializer_list<const TensorView*> views) {
  for (const TensorView* v : views)
    if (v->dtype != DType::BF16)
      return invalid_argument("{}: CUDA activations must be BF16, got {}", op, v->describe());
  return {};
}

template <bool kAdd, typename X>
Status launch_rows(const char* name, X* x, int64_t ldx, const bf16* delta, int64_t ldd, const float* w,
                   float eps, bf16* out, int64_t ldo, int64_t T, int64_t N, const CudaContext& cx) {
  if (T == 0 || N == 0) return {};
  const bool vec = N % 8 == 0 && ldx % 8 == 0 && ldo % 8 == 0 && aligned16(x) && aligned16(out) &&
                   (!kAdd || (ldd % 8 == 0 && aligned16(delta)));
  if (vec)
    return launch(name, {dim3(unsigned(T)), dim3(norm_row_threads(N, 8))}, cx.stream, rms_norm_kernel<8, kAdd, X>,
                  x, ldx, delta, ldd, w, eps, out, ldo, int(N));
  return launch(name, {dim3(unsigned(T)), dim3(norm_row_threads(N, 1))}, cx.stream, rms_norm_kernel<1, kAdd, X>, x,
                ldx, delta, ldd, w, eps, out, ldo, int(N));
}

// The residual stream (norm input) is bf16 or fp32; the normed output and delta are bf16 activations.
Status check_residual(const char* op, const TensorView& x) {
  if (x.dtype != DType::BF16 && x.dtype != DType::F32)
    return invalid_argument("{}: CUDA residual must be BF16 or F32, got {}", op, x.describe());
  return {};
}

}  // namespace

int norm_row_threads(int64_t N, int vec) {
  const int64_t per = (N + vec - 1) / vec;
  return int(std::clamp<int64_t>((per + 31) / 32 * 32, 32, 256));
}

Status launch_rms_norm(const backend::RmsNormArgs& a, const CudaContext& cx) {
  RILL_TRY(check_bf16("rms_norm", {&a.out}));
  RILL_TRY(check_residual("rms_norm", a.x));
  // x is only read; the kernel's pointer is non-const because add_rms_norm shares it.
  const float* w = a.weight.ptr<const float>();
  auto* out = static_cast<bf16*>(a.out.data);
  if (a.x.dtype == DType::F32)
    return launch_rows<false>("rms_norm", static_cast<float*>(a.x.data), a.x.stride(0), nullptr, 0, w, a.eps,
                              out, a.out.stride(0), a.x.size(0), a.x.size(1), cx);
  return launch_rows<false>("rms_norm", static_cast<bf16*>(a.x.data), a.x.stride(0), nullptr, 0, w, a.eps,
                            out, a.out.stride(0), a.x.size(0), a.x.size(1), cx);
}

Status launch_add_rms_norm(const backend::AddRmsNormArgs& a, const CudaContext& cx) {
  RILL_TRY(check_bf16("add_rms_norm", {&a.delta, &a.out}));
  RILL_TRY(check_residual("add_rms_norm", a.residual));
  const auto* delta = static_cast<const bf16*>(a.delta.data);
  const float* w = a.weight.ptr<const float>();
  auto* out = static_cast<bf16*>(a.out.data);
  if (a.residual.dtype == DType::F32)
    return launch_rows<true>("add_rms_norm", static_cast<float*>(a.residual.data), a.residual.stride(0),
                             delta, a.delta.stride(0), w, a.eps, out, a.out.stride(0), a.residual.size(0),
                             a.residual.size(1), cx);
  return launch_rows<true>("add_rms_norm", static_cast<bf16*>(a.residual.data), a.residual.stride(0), delta,
                           a.delta.stride(0), w, a.eps, out, a.out.stride(0), a.residual.size(0),
                           a.residual.size(1), cx);
}

Status launch_kda_output_norm(const backend::KdaOutputArgs& a, const CudaContext& cx) {
  RILL_TRY(check_bf16("kda_output", {&a.o, &a.gate, &a.out}));
  const int64_t T = a.o.size(0), Hk = a.o.size(1), d = a.o.size(2);
  if (T == 0 || Hk == 0 || d == 0) return {};
  const int64_t rows = T * Hk;
  constexpr int kWarps = 8;
  const unsigned grid = unsigned((rows + kWarps - 1) / kWarps);
  const auto* o = static_cast<const bf16*>(a.o.data);
  const auto* g = static_cast<const bf16*>(a.gate.data);
  auto* out = static_cast<bf16*>(a.out.data);
  const uint64_t bits = uint64_t(d) | uint64_t(a.o.stride(0)) | uint64_t(a.o.stride(1)) |
                        uint64_t(a.gate.stride(0)) | uint64_t(a.out.stride(0));
  const uint64_t addr =
      reinterpret_cast<uintptr_t>(o) | reinterpret_cast<uintptr_t>(g) | reinterpret_cast<uintptr_t>(out);
  const LaunchShape shape{dim3(grid), dim3(kWarps * 32)};
  if ((bits & 3) == 0 && (addr & 7) == 0)
    return launch("kda_output_norm", shape, cx.stream, kda_output_norm_kernel<4>, o, a.o.stride(0),
                  a.o.stride(1), g, a.gate.stride(0), a.weight.ptr<const float>(), a.eps, out,
                  a.out.stride(0), rows, int(Hk), int(d));
  return launch("kda_output_norm", shape, cx.stream, kda_output_norm_kernel<1>, o, a.o.stride(0),
                a.o.stride(1), g, a.gate.stride(0), a.weight.ptr<const float>(), a.eps, out, a.out.stride(0),
                rows, int(Hk), int(d));
}

}  // namespace rill::cuda
