#include "model/weights/fp8_codec.h"

#include <algorithm>

namespace rill::model {

void dequantize_fp8(const uint8_t* codes, int64_t rows, int64_t cols, const float* scales, backend::Fp8Blocks block,
                    void* dst, DType to) {
  const int64_t bc = std::min<int64_t>(block.cols, cols), sc = block.scale_cols(cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = f8e4m3_to_f32(codes[r * cols + c]) * scales[(r / block.rows) * sc + c / bc];
      const int64_t i = r * cols + c;
      switch (to) {
        case DType::F32: static_cast<float*>(dst)[i] = v; break;
        case DType::BF16: static_cast<uint16_t*>(dst)[i] = f32_to_bf16(v); break;
        case DType::F16: static_cast<uint16_t*>(dst)[i] = f32_to_f16(v); break;
        default: break;  // the loader asks for float matrix dtypes only
      }
    }
}

}  // namespace rill::model
