#include "model/weights/fp8_codec.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"

namespace rill::model {

void quantize_fp8(const void* src, DType from, int64_t rows, int64_t cols, int64_t pitch, backend::Fp8Blocks block,
                  uint8_t* codes, float* scales) {
  const int64_t bc = std::min<int64_t>(block.cols, cols), sc = block.scale_cols(cols);
  // Block rows are independent (disjoint codes and scales): one task each, so quantizing a 48B checkpoint at load
  // runs on every core.
  default_thread_pool().parallel_for(block.scale_rows(rows), 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> amax(static_cast<size_t>(sc));
    for (int64_t bi = b0; bi < b1; ++bi) {
      const int64_t r0 = bi * block.rows, r1 = std::min<int64_t>(rows, r0 + block.rows);
      std::fill(amax.begin(), amax.end(), 0.0f);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          float& m = amax[size_t(c / bc)];
          m = std::max(m, std::fabs(load_as_f32(src, from, size_t(r * pitch + c))));
        }
      float* srow = scales + bi * sc;
      for (int64_t b = 0; b < sc; ++b) srow[b] = amax[size_t(b)] > 0.0f ? amax[size_t(b)] / kF8E4M3Max : 1.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < cols; ++c)
          codes[r * cols + c] = f32_to_f8e4m3(load_as_f32(src, from, size_t(r * pitch + c)) / srow[c / bc]);
    }
  });
}

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
