// The native FP8 GEMM's staging (fp8_native.h): one warp per token row, a half-warp per 128-column group,
// finds each group's amax (8 bf16 per lane, a shuffle reduction), stores scale = amax / 448 (1 for an all-zero
// group) and the codes x / scale rounded to E4M3 (saturating); a grid-stride copy puts the weight's block
// scales at the padded row stride. Both write scratch an earlier kernel may still read: every CTA waits first
// (pdl_prologue).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "backend/cuda/common/align.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/gemm/fp8_native.h"

namespace rill::cuda {
namespace {

constexpr int kGroup = 128, kRowsPerBlock = 8;
constexpr float kE4m3Max = 448.0f;

struct QuantParams {
  const __nv_bfloat16* x;  // [M, K], row stride ldx
  int64_t ldx;
  int M, K;
  uint8_t* codes;   // [M, K]
  float* x_scales;  // [K / 128, M]
  // Gathered rows (launch_fp8_quantize_gathered_rows): row m of the codes is row src_rows[m] of x, for m below
  // *n_valid (the rest are left as they are); nullptr: row m of x, every row.
  const int32_t* src_rows;
  const int32_t* n_valid;
};

// One warp per row: each half-warp takes one 128-column group (16 lanes x 8 bf16, one 16-byte load a lane)
// and the warp walks the row's groups two at a time, kGroupsInFlight of them loaded before any is reduced.
// (A warp per (row, group) with one 8-byte load a lane ran the FP8 8K prompt's quantisation at about a third
// of the copy rate, ncu on the H100: 7.5 ms over 26 layers.) The loop is warp-uniform (an odd group count
// leaves the last pair's second half idle but still in the shuffles).
constexpr int kGroupsInFlight = 8;

__device__ __forceinline__ uint32_t e4m3x4(float a, float b, float c, float d) {
  const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return uint32_t(lo) | (uint32_t(hi) << 16);
}

__device__ __forceinline__ void bf16x8_to_float(const uint4& u, float (&v)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(h[i]);
    v[2 * i] = t.x;
    v[2 * i + 1] = t.y;
  }
}

__global__ void __launch_bounds__(kRowsPerBlock * 32) fp8_quantize_rows_kernel(const QuantParams p) {
  pdl_prologue();
  const int lane = threadIdx.x & 31, half = lane >> 4, col = (lane & 15) * 8;
  const int m = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  if (m >= p.M || (p.n_valid && m >= *p.n_valid)) return;  // the whole warp: one row
  const int64_t src = p.src_rows ? int64_t(p.src_rows[m]) : int64_t(m);
  const __nv_bfloat16* row = p.x + src * p.ldx;
  const int n_groups = p.K / kGroup;
  for (int g0 = 0; g0 < n_groups; g0 += kGroupsInFlight) {
    uint4 u[kGroupsInFlight / 2];
#pragma unroll
    for (int j = 0; j < kGroupsInFlight / 2; ++j) {
      const int g = g0 + 2 * j + half;
      u[j] = g < n_groups ? *reinterpret_cast<const uint4*>(row + g * kGroup + col) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < kGroupsInFlight / 2; ++j) {
      const int g = g0 + 2 * j + half;
      float v[8];
      bf16x8_to_float(u[j], v);
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));  // a half
      if (g >= n_groups) continue;
      const float scale = amax > 0.0f ? amax / kE4m3Max : 1.0f;
      const uint2 codes = make_uint2(e4m3x4(v[0] / scale, v[1] / scale, v[2] / scale, v[3] / scale),
                                     e4m3x4(v[4] / scale, v[5] / scale, v[6] / scale, v[7] / scale));
      *reinterpret_cast<uint2*>(p.codes + int64_t(m) * p.K + g * kGroup + col) = codes;
      if (col == 0) p.x_scales[int64_t(g) * p.M + m] = scale;
    }
  }
}

// Fp8ActScaling::PerToken (the per-channel FP8 experts, moe/grouped_wgmma.cu Fp8ChannelWeights): one scale a
// row over all K columns. A warp per row, 8 bf16 a lane (256 columns a pass, kTokenPassesInFlight passes
// loaded before any is reduced); the amax pass reads the row from memory, the codes pass again (L1 hits: a
// row is a few KB).
constexpr int kTokenPassesInFlight = 4;

__global__ void __launch_bounds__(kRowsPerBlock * 32) fp8_quantize_tokens_kernel(const QuantParams p) {
  pdl_prologue();
  const int lane = threadIdx.x & 31;
  const int m = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  if (m >= p.M || (p.n_valid && m >= *p.n_valid)) return;  // the whole warp: one row
  const int64_t src = p.src_rows ? int64_t(p.src_rows[m]) : int64_t(m);
  const __nv_bfloat16* row = p.x + src * p.ldx;
  constexpr int kPass = 32 * 8;
  float amax = 0.0f;
  for (int c0 = 0; c0 < p.K; c0 += kPass * kTokenPassesInFlight) {
    uint4 u[kTokenPassesInFlight];
#pragma unroll
    for (int j = 0; j < kTokenPassesInFlight; ++j) {
      const int c = c0 + j * kPass + lane * 8;
      u[j] = c < p.K ? *reinterpret_cast<const uint4*>(row + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < kTokenPassesInFlight; ++j) {
      float v[8];
      bf16x8_to_float(u[j], v);
#pragma unroll
      for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float scale = amax > 0.0f ? amax / kE4m3Max : 1.0f;
  for (int c = lane * 8; c < p.K; c += kPass) {
    float v[8];
    bf16x8_to_float(*reinterpret_cast<const uint4*>(row + c), v);
    *reinterpret_cast<uint2*>(p.codes + int64_t(m) * p.K + c) =
        make_uint2(e4m3x4(v[0] / scale, v[1] / scale, v[2] / scale, v[3] / scale),
                   e4m3x4(v[4] / scale, v[5] / scale, v[6] / scale, v[7] / scale));
  }
  if (lane == 0) p.x_scales[m] = scale;
}

struct ScaleCopyParams {
  const float* src;  // [rows, cols], row stride lds
  int64_t lds;
  int rows, cols, ld;  // dst row stride ld >= cols; the padding is zero
  float* dst;
};

__global__ void __launch_bounds__(256) fp8_copy_scales_kernel(const ScaleCopyParams p) {
  pdl_prologue();
  const int64_t total = int64_t(p.rows) * p.ld;
  for (int64_t i = int64_t(blockIdx.x) * 256 + threadIdx.x; i < total; i += int64_t(gridDim.x) * 256) {
    const int r = int(i / p.ld), c = int(i - int64_t(r) * p.ld);
    p.dst[i] = c < p.cols ? p.src[int64_t(r) * p.lds + c] : 0.0f;
  }
}

// The weight scales' row stride rounded up to 4 blocks, as PyTorch's _scaled_mm checks ask for cuBLASLt's
// BLK128x128_32F scales (not yet checked on the GPU here: PrefillNativeFp8 at K = 2304, 18 blocks, is the
// case).
constexpr bool kPadScales = true;

bool pad_scales() {
  return kPadScales;
}

}  // namespace

bool fp8_native_eligible(const backend::GemmArgs& a) {
  const backend::LinearWeight& w = *a.w;
  const int64_t K = a.x.size(1), N = w.out_features();
  return w.format == backend::WeightFormat::Fp8 && w.weight.dtype == DType::F8E4M3 && w.block.rows == 128 &&
         w.block.cols == 128 && w.scales.dtype == DType::F32 &&
         (w.scales.size(1) <= 1 || w.scales.stride(1) == 1) && K % kGroup == 0 && N % 16 == 0 &&
         w.weight.stride(1) == 1 && w.weight.stride(0) % 16 == 0 && aligned16(w.weight.data) &&
         a.x.dtype == DType::BF16 && a.x.stride(1) == 1 && a.x.stride(0) % 8 == 0 && aligned16(a.x.data) &&
         a.out.dtype == DType::BF16 && a.out.stride(1) == 1 && a.out.stride(0) % 8 == 0 &&
         aligned16(a.out.data);
}

Fp8NativeStage fp8_native_stage(int64_t M, const backend::LinearWeight& w, void* base) {
  const int64_t K = w.in_features(), N = w.out_features(), kb = K / kGroup, nb = (N + 127) / 128;
  Fp8NativeStage s;
  s.w_scale_ld = pad_scales() ? (kb + 3) / 4 * 4 : kb;
  const size_t codes = align256(size_t(M) * size_t(K)), xs = align256(size_t(kb) * size_t(M) * 4),
               ws = align256(size_t(nb) * size_t(s.w_scale_ld) * 4);
  s.bytes = codes + xs + ws;
  if (base) {
    char* b = static_cast<char*>(base);
    s.codes = b;
    s.x_scales = reinterpret_cast<float*>(b + codes);
    s.w_scales = reinterpret_cast<float*>(b + codes + xs);
  }
  return s;
}

Status launch_fp8_quantize_rows(const void* x, int64_t ldx, int64_t M, int64_t K, void* codes,
                                float* x_scales, Fp8ActScaling scaling, cudaStream_t stream) {
  if (M <= 0) return {};
  return launch_fp8_quantize_gathered_rows(x, ldx, nullptr, nullptr, M, K, codes, x_scales, scaling, stream);
}

Status launch_fp8_quantize_gathered_rows(const void* x, int64_t ldx, const int32_t* src_rows,
                                         const int32_t* n_valid, int64_t M, int64_t K, void* codes,
                                         float* x_scales, Fp8ActScaling scaling, cudaStream_t stream) {
  if (M <= 0) return {};
  const bool per_token = scaling == Fp8ActScaling::PerToken;
  if (K % (per_token ? 8 : kGroup) != 0 || ldx % 8 != 0 || !aligned16(x) || !aligned16(codes))
    return invalid_argument(
        "fp8_quantize_rows: K must be a multiple of {}, x's rows and the codes 16-byte aligned",
        per_token ? 8 : kGroup);
  QuantParams q{static_cast<const __nv_bfloat16*>(x), ldx, int(M), int(K), static_cast<uint8_t*>(codes),
                x_scales, src_rows, n_valid};
  const LaunchShape shape{dim3(unsigned((M + kRowsPerBlock - 1) / kRowsPerBlock)), dim3(kRowsPerBlock * 32),
                          0};
  if (per_token) return launch("fp8_quantize_tokens", shape, stream, fp8_quantize_tokens_kernel, q);
  return launch("fp8_quantize_rows", shape, stream, fp8_quantize_rows_kernel, q);
}

Status launch_fp8_native_stage(const backend::GemmArgs& a, const Fp8NativeStage& s, cudaStream_t stream) {
  RILL_TRY(launch_fp8_quantize_rows(a.x.data, a.x.stride(0), a.x.size(0), a.x.size(1), s.codes, s.x_scales,
                                    Fp8ActScaling::Group128, stream));
  const backend::LinearWeight& w = *a.w;
  ScaleCopyParams c{static_cast<const float*>(w.scales.data),
                    w.scales.stride(0),
                    int(w.scales.size(0)),
                    int(w.scales.size(1)),
                    int(s.w_scale_ld),
                    s.w_scales};
  const int64_t total = int64_t(c.rows) * c.ld;
  const dim3 cgrid(unsigned(std::max<int64_t>(1, std::min<int64_t>((total + 255) / 256, 1024))));
  return launch("fp8_copy_scales", {cgrid, dim3(256), 0}, stream, fp8_copy_scales_kernel, c);
}

}  // namespace rill::cuda
