// launch(): the one way kernels are launched in backend/cuda — cudaLaunchKernelEx with programmatic dependent
// launch (PDL, sm_90) allowed, so a kernel's CTAs can become resident while the kernel before it in the
// stream finishes. A decode step is ~450 short kernels; without PDL every boundary costs the launch latency
// plus the ramp of the next kernel's first loads. The contract that makes it safe is on the device side
// (common/pdl.cuh): every kernel launched here calls pdl_wait() in every CTA before it reads anything an
// earlier kernel wrote or writes anything an earlier kernel may still read, and only reads weights (never
// written during a step) before that. A backend made with CudaBackendOptions::pdl off (`--backend-option
// pdl=0`, the A/B switch of `rill bench`) launches on its stream without the attribute (the kernels' waits
// are then no-ops).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "core/status.h"

namespace rill::cuda {

// Whether launches on `stream` carry the PDL attribute: yes unless set_stream_pdl(stream, false) said
// otherwise (the backend's options, set when it creates its stream). Keyed by stream so that launch() keeps
// its arguments and two backends in one process (a test's A and B) can differ; the lookup is one relaxed load
// while no stream has PDL off.
bool pdl_enabled(cudaStream_t stream);
void set_stream_pdl(cudaStream_t stream, bool enabled);

struct LaunchShape {
  dim3 grid;
  dim3 block;
  size_t smem = 0;
  unsigned cluster = 1;  // CTAs per thread-block cluster along x (grid.x a multiple of it); 1: no clusters
};

template <typename... Params, typename... Args>
Status launch(const char* name, const LaunchShape& shape, cudaStream_t stream, void (*kernel)(Params...),
              Args&&... args) {
  cudaLaunchAttribute attr[2]{};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl_enabled(stream) ? 1 : 0;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = shape.cluster;
  attr[1].val.clusterDim.y = 1;
  attr[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = shape.grid;
  cfg.blockDim = shape.block;
  cfg.dynamicSmemBytes = shape.smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = shape.cluster > 1 ? 2 : 1;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (err != cudaSuccess)
    return internal_error("kernel {} failed to launch: {}", name, cudaGetErrorString(err));
  return {};
}

}  // namespace rill::cuda
