// Host FP8 block quantization and dequantization for the loader (issue #35): `--quantization fp8` quantizes a
// bf16 checkpoint's matrices as DeepSeek-V3 does (per block scale = amax / 448, codes = E4M3 round-to-nearest-
// even of value / scale), and a stored FP8 matrix the model keeps dense is dequantized exactly (code * scale).
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/dtype.h"

namespace rill::model {

// `src` [rows, cols] of float dtype `from`, row r at src + r * pitch elements, into `codes` [rows, cols] and F32
// `scales` [block.scale_rows(rows), block.scale_cols(cols)] (row-major). An all-zero block gets scale 1.
void quantize_fp8(const void* src, DType from, int64_t rows, int64_t cols, int64_t pitch, backend::Fp8Blocks block,
                  uint8_t* codes, float* scales);

// `codes` [rows, cols] times `scales` (as quantize_fp8 lays them out) into `dst` [rows, cols] of dtype `to`.
void dequantize_fp8(const uint8_t* codes, int64_t rows, int64_t cols, const float* scales, backend::Fp8Blocks block,
                    void* dst, DType to);

}  // namespace rill::model
