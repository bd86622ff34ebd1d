// Paged MLA cache write: one warp per token; KimiRMSNorm of c (fp32 sum of squares, normalised value rounded
// to bf16, times the weight, rounded) and the raw k_pe, stored at the token's (block, offset).
#include "backend/cuda/common/align.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/mla/mla.h"
#include "backend/cuda/mla/params.h"

namespace rill::cuda {
namespace mla {
namespace {

constexpr int kWarps = 8;

__global__ void __launch_bounds__(kWarps * 32, 4) cache_write_kernel(const CacheWriteParams p) {
  pdl_prologue();
  const int lane = threadIdx.x & 31;
  const int t = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (t >= p.n_tokens) return;
  const int s = p.token_seq[t], pos = p.token_pos[t];
  if (pos < 0 || pos / p.block_size >= p.max_blocks_per_seq) return;
  const int block = p.block_tables[int64_t(s) * p.max_blocks_per_seq + pos / p.block_size];
  if (block < 0 || block >= p.n_blocks) return;  // no block: nothing to write (the CPU reference errors)
  const uint4* src = reinterpret_cast<const uint4*>(p.ckv + int64_t(t) * p.ckv_row);
  uint4* dst = reinterpret_cast<uint4*>(p.cache + int64_t(block) * p.cache_block +
                                        int64_t(pos % p.block_size) * p.cache_row);
  const int n_lat = p.kv_lora / 8, n_all = p.width / 8;

  // bf16 pairs travel as 32-bit words: bf16 -> f32 is the high half of the f32 bit pattern.
  float ss = 0.0f;
  for (int c = lane; c < n_lat; c += 32) {
    const uint4 v = src[c];
    const uint32_t in[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float lo = __uint_as_float(in[j] << 16), hi = __uint_as_float(in[j] & 0xffff0000u);
      ss += lo * lo + hi * hi;
    }
  }
  ss = warp_sum(ss);
  const float r = rsqrtf(ss * __frcp_rn(float(p.kv_lora)) + p.eps);
  // KimiRMSNorm: the normalised value is rounded to bf16 before the weight multiply, the product rounded.
  auto norm = [&](float x, int i) {
    return __bfloat16_as_ushort(to_bf16(to_f32(to_bf16(x * r)) * __ldg(p.weight + i)));
  };
  for (int c = lane; c < n_lat; c += 32) {
    const uint4 v = src[c];
    const uint32_t in[4] = {v.x, v.y, v.z, v.w};
    uint32_t o[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = c * 8 + 2 * j;
      o[j] = uint32_t(norm(__uint_as_float(in[j] << 16), i)) |
             (uint32_t(norm(__uint_as_float(in[j] & 0xffff0000u), i + 1)) << 16);
    }
    dst[c] = make_uint4(o[0], o[1], o[2], o[3]);
  }
  for (int c = n_lat + lane; c < n_all; c += 32) dst[c] = src[c];  // k_pe: neither normalised nor rotated
}

}  // namespace
}  // namespace mla

Status launch_mla_cache_write(const backend::MlaCacheWriteArgs& a, const CudaContext& cx) {
  const backend::BatchLayout& l = *a.layout;
  const int64_t width = a.ckv.size(1), lat = a.norm_weight.size(0);
  if (a.ckv.dtype != DType::BF16 || a.cache.dtype != DType::BF16)
    return invalid_argument("mla_cache_write (CUDA): ckv and cache must be BF16, got {} and {}",
                            dtype_name(a.ckv.dtype), dtype_name(a.cache.dtype));
  if (width % 8 != 0 || lat % 8 != 0)
    return invalid_argument("mla_cache_write (CUDA): widths must be multiples of 8 (kv_lora {}, row {})", lat,
                            width);
  if (a.ckv.stride(0) % 8 != 0 || a.cache.stride(0) % 8 != 0 || a.cache.stride(1) % 8 != 0 ||
      !aligned16(a.ckv.data) || !aligned16(a.cache.data))
    return invalid_argument("mla_cache_write (CUDA): ckv {} and cache {} rows must be 16-byte aligned",
                            a.ckv.describe(), a.cache.describe());
  if (l.block_size < 1) return invalid_argument("mla_cache_write (CUDA): block size {}", l.block_size);
  if (l.n_tokens == 0) return {};
  mla::CacheWriteParams p{};
  p.ckv = static_cast<const mla::bf16*>(a.ckv.data);
  p.ckv_row = a.ckv.stride(0);
  p.weight = a.norm_weight.ptr<float>();
  p.cache = static_cast<mla::bf16*>(a.cache.data);
  p.cache_block = a.cache.stride(0);
  p.cache_row = a.cache.stride(1);
  p.token_seq = l.token_seq;
  p.token_pos = l.token_pos;
  p.block_tables = l.block_tables;
  p.n_blocks = int(a.cache.size(0));
  p.block_size = l.block_size;
  p.max_blocks_per_seq = l.max_blocks_per_seq;
  p.n_tokens = l.n_tokens;
  p.kv_lora = int(lat);
  p.width = int(width);
  p.eps = a.eps;
  const int grid = (l.n_tokens + mla::kWarps - 1) / mla::kWarps;
  return launch("mla_cache_write", {dim3(unsigned(grid)), dim3(mla::kWarps * 32)}, cx.stream,
                mla::cache_write_kernel, p);
}

}  // namespace rill::cuda
