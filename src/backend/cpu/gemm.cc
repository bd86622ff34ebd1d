// y = x W^T in fp32 from the weight's stored dtype (dense) or its exact MXFP4 / FP8 dequantisation.
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"
#include "backend/cpu/weight_rows.h"

namespace rill::backend {

Status CpuBackend::gemm_impl(const GemmArgs& a) {
  const int64_t M = a.x.size(0), K = a.x.size(1), N = a.w->out_features();
  const bool f32_out = a.out.dtype == DType::F32;  // always true on the CPU (act == F32)
  (void)f32_out;
  // Each thread widens a block of weight rows once and reuses them for every input row.
  constexpr int64_t kRowsPerBlock = 16;
  const int64_t n_blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  cpu::pool().parallel_for(n_blocks, 1, [&](int64_t b, int64_t e) {
    std::vector<float> w(static_cast<size_t>(kRowsPerBlock * K));
    for (int64_t blk = b; blk < e; ++blk) {
      const int64_t n0 = blk * kRowsPerBlock, n1 = std::min(N, n0 + kRowsPerBlock);
      for (int64_t n = n0; n < n1; ++n) {
        float* dst = w.data() + (n - n0) * K;
        cpu::linear_row(*a.w, n, dst);
      }
      for (int64_t m = 0; m < M; ++m) {
        const float* x = cpu::row_f32(a.x, m);
        float* y = cpu::row_f32(a.out, m);
        for (int64_t n = n0; n < n1; ++n) y[n] = cpu::dot(x, w.data() + (n - n0) * K, K);
      }
    }
  });
  return {};
}

}  // namespace rill::backend
