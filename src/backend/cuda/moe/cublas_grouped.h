// CublasGroupedGemm: the prefill-sized expert GEMMs as one cublasGemmGroupedBatchedEx call each. cuBLAS takes
// the problems' sizes on the host, so the caller reads the per-expert slot offsets back once per MoE layer
// (read_offsets: waits for that small copy only, while the gather and pointer kernels run on). Measured on
// the H200 (docs/PERF.md, grouped GEMM lab): 281 / 255 TFLOP/s for the 48B shape's gate_up / down at 8K
// tokens, where rill's mma.sync grouped GEMM reached 157.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"

namespace rill::cuda::moe {

class CublasGroupedGemm {
 public:
  // A cuBLAS handle with its own workspace on the current device, pinned memory for max_experts + 1 offsets.
  static Result<std::unique_ptr<CublasGroupedGemm>> create(int max_experts);
  ~CublasGroupedGemm();
  CublasGroupedGemm(const CublasGroupedGemm&) = delete;
  CublasGroupedGemm& operator=(const CublasGroupedGemm&) = delete;

  // Enqueues the copy of offsets[0..E] (device, written earlier on `stream`) to pinned host memory;
  // wait_offsets() blocks until that copy (and what precedes it on the stream) is done and returns the E + 1
  // values, valid until the next copy. Work enqueued in between runs on while the host waits.
  Status copy_offsets(const int32_t* offsets, int E, cudaStream_t stream);
  Result<const int32_t*> wait_offsets();

  // C_g [m_g, n] = A_g [m_g, k] . W_g [n, k]^T for the groups g with m_g > 0, all row-major bf16 with fp32
  // accumulation: m[0..groups) holds m_g of each group in the order of the device pointer arrays a/w/c (each
  // `groups` long, filled on the device), whose rows have the given leading dimensions (elements).
  Status run(const int* m, int groups, int n, int k, const void* const* a, int64_t lda, const void* const* w,
             int64_t ldw, void* const* c, int64_t ldc, cudaStream_t stream);

 private:
  CublasGroupedGemm() = default;
  cublasHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  int32_t* pinned_offsets_ = nullptr;
  int max_experts_ = 0, copied_experts_ = -1;
  cudaEvent_t copied_ = nullptr;
  // Host arrays of the grouped call, kept to avoid allocating per layer.
  std::vector<int> n_, k_, lda_, ldw_, ldc_, ones_;
  std::vector<float> alpha_, beta_;
  std::vector<cublasOperation_t> trans_w_, trans_a_;
};

}  // namespace rill::cuda::moe
