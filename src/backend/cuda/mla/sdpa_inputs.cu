// Inputs of the cuDNN prefill path (cudnn_sdpa.h) that the expansion does not give in the layout cuDNN reads:
// K per context row and head as one 192-wide vector [k_nope(h) ; k_pe] (cuDNN takes strided tensors, but the
// shared k_pe lives in the latent rows, not beside each head's k_nope, so no stride reaches it), and the
// batch arrays of one fused-attention call (lengths and ragged offsets), copied from a kernel parameter so
// the host never waits on a copy. V needs no copy: it is read in place from kvx through strides.
#include <algorithm>

#include "backend/cuda/common/check.h"
#include "backend/cuda/mla/phases.h"

namespace rill::cuda::mla {
namespace {

constexpr int kBuildThreads = 256;
constexpr int kChunksPerHead = kQk / 8;  // 24 16-byte chunks: 16 of k_nope, 8 of k_pe

// One thread per 16-byte chunk of K (grid-stride): k_nope chunks from kvx, k_pe chunks from the latent row
// (the same 128 bytes for every head of a row: they stay in L1/L2 across the row's heads); then the zeroed
// tail after K (params.h kSdpaTailRows).
__global__ void __launch_bounds__(kBuildThreads) k_build_kernel(const KBuildParams p) {
  const int64_t per_row = int64_t(p.n_heads) * kChunksPerHead;
  const int64_t total = int64_t(p.rows) * per_row;
  const int64_t tail = int64_t(kSdpaTailRows) * p.n_heads * (kKvbRows / 8);
  for (int64_t i = int64_t(blockIdx.x) * kBuildThreads + threadIdx.x; i < total + tail;
       i += int64_t(gridDim.x) * kBuildThreads) {
    if (i >= total) {
      *reinterpret_cast<uint4*>(p.k + i * 8) = make_uint4(0, 0, 0, 0);
      continue;
    }
    const int64_t row = i / per_row;
    const int rem = int(i - row * per_row), h = rem / kChunksPerHead, c = rem % kChunksPerHead;
    const bf16* src = c < kNope / 8
                          ? p.kvx + row * (int64_t(p.n_heads) * kKvbRows) + int64_t(h) * kKvbRows + c * 8
                          : p.ctx + row * kLatK + kLora + (c - kNope / 8) * 8;
    *reinterpret_cast<uint4*>(p.k + i * 8) = *reinterpret_cast<const uint4*>(src);
  }
}

// The call's batch arrays in the device layout of SdpaBatch (params.h): a plain copy of the kernel parameter.
// (8-byte words: the parameter is only as aligned as SdpaBatch.)
__global__ void sdpa_batch_kernel(const SdpaBatch b, unsigned long long* dst) {
  const unsigned long long* src = reinterpret_cast<const unsigned long long*>(&b);
  for (int i = threadIdx.x; i < int(sizeof(SdpaBatch) / 8); i += blockDim.x) dst[i] = src[i];
}

}  // namespace

Status launch_k_build(const KBuildParams& p, cudaStream_t stream) {
  const int64_t total =
      int64_t(p.rows) * p.n_heads * kChunksPerHead + int64_t(kSdpaTailRows) * p.n_heads * (kKvbRows / 8);
  if (p.rows <= 0) return {};
  const int64_t blocks = std::min<int64_t>((total + kBuildThreads - 1) / kBuildThreads, int64_t(1) << 20);
  k_build_kernel<<<unsigned(blocks), kBuildThreads, 0, stream>>>(p);
  RILL_CUDA_CHECK_LAUNCH("mla_sdpa_k_build");
  return {};
}

Status launch_sdpa_batch(const SdpaBatch& b, void* dst, cudaStream_t stream) {
  static_assert(sizeof(SdpaBatch) % 8 == 0 && alignof(SdpaBatch) == 8);
  sdpa_batch_kernel<<<1, 256, 0, stream>>>(b, static_cast<unsigned long long*>(dst));
  RILL_CUDA_CHECK_LAUNCH("mla_sdpa_batch");
  return {};
}

}  // namespace rill::cuda::mla
