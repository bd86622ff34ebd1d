// K3 Block Attention Residuals depth mix on the CPU (spec §3.9): per token, a softmax over the candidates
// (block snapshots and the partial sum) scored against a learned pseudo-query, all in fp32.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace rill::backend {

Status CpuBackend::attn_res_mix_impl(const AttnResMixArgs& a) {
  const int64_t N = a.candidates.size(0), T = a.candidates.size(1), H = a.candidates.size(2);
  // The pseudo-query folds the key norm's weight in (norm * proj): exact in fp32 for bf16-valued weights.
  std::vector<float> query(static_cast<size_t>(H));
  for (int64_t c = 0; c < H; ++c)
    query[size_t(c)] = a.norm_weight.ptr<float>()[c] * a.proj_weight.ptr<float>()[c];
  auto candidate = [&](int64_t j, int64_t t) {
    return a.candidates.ptr<float>() + j * a.candidates.stride(0) + t * a.candidates.stride(1);
  };
  cpu::pool().parallel_for(T, 8, [&](int64_t b, int64_t e) {
    std::vector<float> z(static_cast<size_t>(N));
    for (int64_t t = b; t < e; ++t) {
      float zmax = -INFINITY;
      for (int64_t j = 0; j < N; ++j) {
        const float* v = candidate(j, t);
        double ss = 0;
        for (int64_t c = 0; c < H; ++c) ss += double(v[c]) * v[c];
        const float r = 1.0f / std::sqrt(float(ss / double(H)) + a.eps);
        z[size_t(j)] = r * cpu::dot(v, query.data(), H);
        zmax = std::max(zmax, z[size_t(j)]);
      }
      float sum = 0;
      for (float& x : z) sum += (x = std::exp(x - zmax));
      float* y = cpu::row_f32(a.out, t);
      for (int64_t c = 0; c < H; ++c) y[c] = 0.0f;
      for (int64_t j = 0; j < N; ++j) {
        const float p = z[size_t(j)] / sum;
        const float* v = candidate(j, t);
        for (int64_t c = 0; c < H; ++c) y[c] += p * v[c];
      }
    }
  });
  return {};
}

}  // namespace rill::backend
