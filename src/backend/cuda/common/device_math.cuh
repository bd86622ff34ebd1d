// Device helpers shared by the kernel families: bf16 <-> f32, activations, warp/block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cstdint>
#include <type_traits>

namespace rill::cuda {

// kVec consecutive bf16 widened to fp32: a multiple of 8 is 16-byte loads, 4 one 8-byte load, else scalar loads.
template <int kVec>
__device__ __forceinline__ void load_bf16(const __nv_bfloat16* p, float (&f)[kVec]) {
  if constexpr (kVec > 8 && kVec % 8 == 0) {
#pragma unroll
    for (int h = 0; h < kVec / 8; ++h) {
      const uint4 v = *reinterpret_cast<const uint4*>(p + 8 * h);
      const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 t = __bfloat1622float2(b[i]);
        f[8 * h + 2 * i] = t.x;
        f[8 * h + 2 * i + 1] = t.y;
      }
    }
  } else if constexpr (kVec == 8 || kVec == 4) {
    using Word = std::conditional_t<kVec == 8, uint4, uint2>;
    const Word v = *reinterpret_cast<const Word*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < kVec / 2; ++i) {
      const float2 t = __bfloat1622float2(h[i]);
      f[2 * i] = t.x;
      f[2 * i + 1] = t.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) f[i] = __bfloat162float(p[i]);
  }
}

// kVec fp32 values rounded (to nearest even) and stored as consecutive bf16, vectorised like load_bf16.
template <int kVec>
__device__ __forceinline__ void store_bf16(__nv_bfloat16* p, const float (&f)[kVec]) {
  if constexpr (kVec == 8 || kVec == 4) {
    using Word = std::conditional_t<kVec == 8, uint4, uint2>;
    Word v;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < kVec / 2; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    *reinterpret_cast<Word*>(p) = v;
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) p[i] = __float2bfloat16_rn(f[i]);
  }
}

// Loads / stores kVec consecutive values of a row held in bf16 or fp32 (the residual stream and the AttnRes
// state may be either): one spelling for kernels templated on the element type. Vector widths as load_bf16;
// fp32 rows use 16-byte accesses when kVec is a multiple of 4.
template <int kVec>
__device__ __forceinline__ void load_row(const __nv_bfloat16* p, float (&v)[kVec]) {
  load_bf16<kVec>(p, v);
}
template <int kVec>
__device__ __forceinline__ void load_row(const float* p, float (&v)[kVec]) {
  if constexpr (kVec % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kVec; i += 4) {
      const float4 q = *reinterpret_cast<const float4*>(p + i);
      v[i] = q.x, v[i + 1] = q.y, v[i + 2] = q.z, v[i + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = p[i];
  }
}
template <int kVec>
__device__ __forceinline__ void store_row(__nv_bfloat16* p, const float (&v)[kVec]) {
  store_bf16<kVec>(p, v);
}
template <int kVec>
__device__ __forceinline__ void store_row(float* p, const float (&v)[kVec]) {
  if constexpr (kVec % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kVec; i += 4)
      *reinterpret_cast<float4*>(p + i) = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) p[i] = v[i];
  }
}

__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ __nv_bfloat16 to_bf16(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + __expf(-x)); }
__device__ __forceinline__ float siluf(float x) { return x / (1.0f + __expf(-x)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < n_warps ? partial[lane] : 0.0f;
  return warp_sum(v);
}

}  // namespace rill::cuda
