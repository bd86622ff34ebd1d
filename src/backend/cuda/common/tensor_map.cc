#include "backend/cuda/common/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <string>

namespace rill::cuda {
namespace {

struct Encoder {
  PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  std::string error;
};

const Encoder& encoder() {
  static const Encoder e = [] {
    Encoder r;
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
    if (err != cudaSuccess || q != cudaDriverEntryPointSuccess || fn == nullptr)
      r.error = fmt::format("the CUDA driver has no cuTensorMapEncodeTiled ({}, query result {})",
                            cudaGetErrorString(err), int(q));
    else
      r.fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    return r;
  }();
  return e;
}

}  // namespace

const char* tensor_map_refusal(const TensorMapBf16& t) {
  if (t.rank < 2 || t.rank > 3) return "rank must be 2 or 3";
  if ((reinterpret_cast<uintptr_t>(t.base) & 15) != 0) return "the base address must be 16-byte aligned";
  for (int d = 0; d < t.rank; ++d) {
    if (t.dims[d] == 0 || t.dims[d] > (uint64_t(1) << 32)) return "each dimension must be in [1, 2^32]";
    if (t.box[d] == 0 || t.box[d] > 256) return "each box dimension must be in [1, 256]";
  }
  const uint32_t row_bytes = t.box[0] * (t.elem == TensorMapElem::Bf16 ? 2 : 1);
  if (t.swizzle && row_bytes > 128)
    return t.elem == TensorMapElem::Bf16 ? "a 128-byte-swizzled box row holds at most 64 bf16"
                                         : "a 128-byte-swizzled box row holds at most 128 bytes";
  if (!t.swizzle && row_bytes % 16 != 0) return "an unswizzled box row must be a multiple of 16 bytes";
  for (int d = 0; d + 1 < t.rank; ++d)
    if (t.strides[d] % 16 != 0 || t.strides[d] >= (uint64_t(1) << 40))
      return "strides must be multiples of 16 bytes below 2^40";
  return "";
}

Status tensor_map_encoder_ready() {
  const Encoder& e = encoder();
  if (!e.fn) return unavailable("TMA descriptors: {}", e.error);
  return {};
}

Result<CUtensorMap> make_tensor_map(const TensorMapBf16& t, const char* what) {
  if (const char* why = tensor_map_refusal(t); *why)
    return invalid_argument("{}: TMA cannot describe this tensor: {}", what, why);
  const Encoder& e = encoder();
  if (!e.fn) return unavailable("{}: {}", what, e.error);
  CUtensorMap map{};
  cuuint64_t dims[3], strides[2];
  cuuint32_t box[3], elem_strides[3] = {1, 1, 1};
  for (int d = 0; d < t.rank; ++d) {
    dims[d] = t.dims[d];
    box[d] = t.box[d];
    if (d + 1 < t.rank) strides[d] = t.strides[d];
  }
  const CUresult r = e.fn(
      &map, t.elem == TensorMapElem::U8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
      cuuint32_t(t.rank), const_cast<void*>(t.base), dims, strides, box, elem_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, t.swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return invalid_argument(
        "{}: cuTensorMapEncodeTiled failed (CUresult {}) for dims {} x {} x {}, box {} x {} x {}", what,
        int(r), t.dims[0], t.dims[1], t.rank > 2 ? t.dims[2] : 1, t.box[0], t.box[1],
        t.rank > 2 ? t.box[2] : 1);
  return map;
}

}  // namespace rill::cuda
