// Host FP8 dequantization for the loader (issue #35): a stored FP8 matrix the model keeps dense is dequantized
// exactly (code * scale). Quantizing (`--quantization fp8`) is the backend's: Backend::quantize_fp8.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/dtype.h"

namespace rill::model {

// `codes` [rows, cols] times `scales` (laid out as Backend::quantize_fp8 writes them) into `dst` [rows, cols] of
// dtype `to`.
void dequantize_fp8(const uint8_t* codes, int64_t rows, int64_t cols, const float* scales, backend::Fp8Blocks block,
                    void* dst, DType to);

}  // namespace rill::model
