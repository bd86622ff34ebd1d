// Launcher: `--quantization fp8` on the GPU (Backend::quantize_fp8, issue #35): a bf16/f16/f32 matrix already
// in device memory into E4M3 codes and F32 block scales, bit for bit what the CPU backend computes, so the
// loader quantizes a checkpoint as it streams it in without doing the work on the host.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/backend.h"

namespace rill::cuda {

Status launch_quantize_fp8(const backend::QuantizeFp8Args& a, cudaStream_t stream);

}  // namespace rill::cuda
