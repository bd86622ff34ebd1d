// CudaContext: what every launcher gets — the compute stream and the device facts it sizes launches from.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda_backend_options.h"

namespace rill::cuda {

class GemmRunner;
namespace moe {
class CublasGroupedGemm;
}
namespace mla {
class CudnnSdpa;
}

struct CudaContext {
  cudaStream_t stream = nullptr;
  int device = 0;
  int sm_count = 0;               // the device's multiprocessors (cudaDevAttrMultiProcessorCount)
  int cc_major = 0, cc_minor = 0;  // the device's compute capability (sm_90: Hopper's TMA and wgmma)
  size_t max_smem_per_block = 0;  // opt-in limit (cudaDevAttrMaxSharedMemoryPerBlockOptin)
  GemmRunner* gemm = nullptr;     // cuBLASLt handle, plans and algorithm cache
  // Router logits (moe::kRouteLogitsFloats F32), allocated with the backend: a decode step's [T, E] from the
  // split GEMV, a prefill step's from a GEMM in chunks of tokens; a selection kernel reads them (moe/route.cu).
  float* route_logits = nullptr;
  // The arrival counter of the GEMVs that run a tail in their last CTA (gemm/gemv.cuh): zero between launches.
  // One per backend: its kernels run in stream order on `stream`, one such launch at a time.
  unsigned* gemv_counter = nullptr;
  // Kernel-path switches, fixed when the backend is made (make_cuda_backend); read by the launchers and by
  // the scratch-size queries, which must agree with them.
  backend::CudaBackendOptions options;
  // cuBLAS's grouped GEMM for the bf16 experts of prefill-sized MoE steps (options.moe_cublas_grouped).
  moe::CublasGroupedGemm* moe_grouped_gemm = nullptr;
  // cuDNN's fused attention for MLA prefill (options.mla_prefill); null where the build has no cuDNN.
  mla::CudnnSdpa* mla_sdpa = nullptr;
};

}  // namespace rill::cuda
