#include "backend/cuda/common/smem.h"

#include "backend/cuda/common/check.h"

namespace rill::cuda {

Status opt_in_smem(const char* op, const void* kernel, size_t bytes, const CudaContext& cx,
                   std::atomic<uint64_t>* done_devices) {
  if (bytes > cx.max_smem_per_block)
    return unavailable("{} (CUDA): kernel needs {} bytes of shared memory, the device allows {}", op, bytes,
                       cx.max_smem_per_block);
  if (done_devices == nullptr) {
    constexpr size_t kDefaultSmem = 48 * 1024;
    if (bytes > kDefaultSmem)
      RILL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    return {};
  }
  const uint64_t bit = uint64_t(1) << (cx.device & 63);
  if (done_devices->load(std::memory_order_acquire) & bit) return {};
  RILL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  done_devices->fetch_or(bit, std::memory_order_release);
  return {};
}

}  // namespace rill::cuda
