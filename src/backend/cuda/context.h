// CudaContext: what every launcher gets — the compute stream and the device facts it sizes launches from.
#pragma once

#include <cuda_runtime_api.h>

namespace rill::cuda {

class GemmRunner;
namespace moe {
class CublasGroupedGemm;
}

struct CudaContext {
  cudaStream_t stream = nullptr;
  int device = 0;
  int sm_count = 0;
  size_t max_smem_per_block = 0;  // opt-in limit (cudaDevAttrMaxSharedMemoryPerBlockOptin)
  GemmRunner* gemm = nullptr;     // cuBLASLt handle, plans and algorithm cache
  // Router logits of a decode step ([kGemvMaxRows, moe::kMaxExperts] F32), allocated with the backend: the
  // small-batch router computes them with the split GEMV and selects experts in a second kernel.
  float* route_logits = nullptr;
  // The bf16 experts of steps with at least moe_cublas_min_pairs (token, expert) pairs go through cuBLAS's
  // grouped GEMM (moe/cublas_grouped.h; it reads the slot counts back, so never while a graph is captured);
  // nullptr: rill's mma.sync grouped kernels for every grouped step.
  moe::CublasGroupedGemm* moe_grouped_gemm = nullptr;
  long long moe_cublas_min_pairs = 0;
};

}  // namespace rill::cuda
