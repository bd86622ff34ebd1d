// TMA descriptors (CUtensorMap) for Hopper kernels, made on the host with the driver's
// cuTensorMapEncodeTiled, reached through the runtime's cudaGetDriverEntryPointByVersion so nothing links
// libcuda. A descriptor holds the tensor's device address, shape and strides; kernels take it as a `const
// __grid_constant__ CUtensorMap` parameter and common/hopper.cuh's tma_load_* read boxes through its address.
// Made per launch (a few microseconds on the host). A CUDA graph captures kernel parameters by value, so a
// captured launch keeps the descriptor of the buffers it was captured with: correct, because a graph replays
// on the same buffers (the step workspace and the weights do not move between replays).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "core/status.h"

namespace rill::cuda {

// The element type TMA moves: bf16, or bytes (E4M3 codes; TMA only copies them, so U8 describes FP8 too).
enum class TensorMapElem { Bf16, U8 };

// A tensor of rank 2 or 3 (bf16 unless `elem` says bytes) read in boxes laid out with the 128-byte swizzle
// (box[0] elements make 128 bytes at most), zeros for elements outside it; `swizzle` false: boxes land
// row after row as they are (box[0] elements a multiple of 16 bytes; packed bytes that threads read).
struct TensorMapBf16 {
  TensorMapElem elem = TensorMapElem::Bf16;
  const void* base = nullptr;  // 16-byte aligned
  int rank = 2;
  uint64_t dims[3] = {};     // elements, innermost first; dims[0] contiguous
  uint64_t strides[2] = {};  // bytes between consecutive indices of dims 1 and 2: multiples of 16, < 2^40
  uint32_t box[3] = {};      // elements per box along each dim, each 1..256
  bool swizzle = true;       // CU_TENSOR_MAP_SWIZZLE_128B, else SWIZZLE_NONE
};

// Whether TMA can describe `t` (alignment, stride and box limits); an empty string when it can, else why not.
const char* tensor_map_refusal(const TensorMapBf16& t);

// The descriptor; InvalidArgument naming `what` and the refusal for a shape TMA cannot take, Unavailable when
// the driver has no cuTensorMapEncodeTiled (a driver before CUDA 12).
Result<CUtensorMap> make_tensor_map(const TensorMapBf16& t, const char* what);

// Looks the driver entry point up (once per process; later calls return the cached answer). The backend calls
// it when it is made, so no lookup happens while a stream is being captured.
Status tensor_map_encoder_ready();

}  // namespace rill::cuda
