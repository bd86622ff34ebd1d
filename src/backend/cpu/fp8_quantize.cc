// FP8 block quantization on the CPU (Backend::quantize_fp8): the reference the CUDA kernel is checked against
// bit for bit, and what `--quantization fp8` runs when the CPU backend holds the weights.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/thread_pool.h"

namespace rill::backend {

Status CpuBackend::quantize_fp8_impl(const QuantizeFp8Args& a) {
  const int64_t rows = a.src.size(0), cols = a.src.size(1);
  const Fp8Blocks block = a.block;
  const int64_t bc = std::min<int64_t>(block.cols, cols), sc = block.scale_cols(cols);
  const void* src = a.src.data;
  const DType from = a.src.dtype;
  uint8_t* codes = static_cast<uint8_t*>(a.codes.data);
  float* scales = a.scales.ptr<float>();
  // Block rows are independent (disjoint codes and scales): one task each, so a 48B checkpoint quantized on the
  // CPU runs on every core.
  default_thread_pool().parallel_for(block.scale_rows(rows), 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> amax(static_cast<size_t>(sc));
    for (int64_t bi = b0; bi < b1; ++bi) {
      const int64_t r0 = bi * block.rows, r1 = std::min<int64_t>(rows, r0 + block.rows);
      std::fill(amax.begin(), amax.end(), 0.0f);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          float& m = amax[size_t(c / bc)];
          m = std::max(m, std::fabs(load_as_f32(src, from, size_t(r * cols + c))));
        }
      float* srow = scales + bi * sc;
      for (int64_t b = 0; b < sc; ++b) srow[b] = amax[size_t(b)] > 0.0f ? amax[size_t(b)] / kF8E4M3Max : 1.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < cols; ++c)
          codes[r * cols + c] = f32_to_f8e4m3(load_as_f32(src, from, size_t(r * cols + c)) / srow[c / bc]);
    }
  });
  return {};
}

}  // namespace rill::backend
