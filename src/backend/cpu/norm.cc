// RMSNorm (KimiRMSNorm), the fused residual-add + RMSNorm, and KDA's gated output RMSNorm (spec §3.0).
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace rill::backend {
namespace {

// y = w * (x * rsqrt(mean(x^2) + eps)); the normalised value would be rounded to the activation dtype
// before the weight multiply, which is the identity for the CPU's F32 activations.
void rms_norm_row(const float* x, const float* w, float eps, int64_t n, float* y) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float r = 1.0f / std::sqrt(float(ss / double(n)) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = w[i] * (x[i] * r);
}

}  // namespace

Status CpuBackend::rms_norm_impl(const RmsNormArgs& a) {
  const int64_t T = a.x.size(0), N = a.x.size(1);
  cpu::pool().parallel_for(T, 8, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      rms_norm_row(cpu::row_f32(a.x, t), a.weight.ptr<float>(), a.eps, N, cpu::row_f32(a.out, t));
  });
  return {};
}

Status CpuBackend::add_rms_norm_impl(const AddRmsNormArgs& a) {
  const int64_t T = a.residual.size(0), N = a.residual.size(1);
  cpu::pool().parallel_for(T, 8, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* r = cpu::row_f32(a.residual, t);
      const float* d = cpu::row_f32(a.delta, t);
      for (int64_t i = 0; i < N; ++i) r[i] += d[i];
      rms_norm_row(r, a.weight.ptr<float>(), a.eps, N, cpu::row_f32(a.out, t));
    }
  });
  return {};
}

Status CpuBackend::kda_output_impl(const KdaOutputArgs& a) {
  const int64_t T = a.o.size(0), Hk = a.o.size(1), d = a.o.size(2);
  const float* w = a.weight.ptr<float>();
  cpu::pool().parallel_for(T, 4, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      for (int64_t h = 0; h < Hk; ++h) {
        const float* x = a.o.ptr<float>() + t * a.o.stride(0) + h * a.o.stride(1);
        const float* g = cpu::row_f32(a.gate, t) + h * d;
        float* y = cpu::row_f32(a.out, t) + h * d;
        double ss = 0;
        for (int64_t i = 0; i < d; ++i) ss += double(x[i]) * x[i];
        const float r = 1.0f / std::sqrt(float(ss / double(d)) + a.eps);
        for (int64_t i = 0; i < d; ++i) y[i] = (x[i] * r) * w[i] * cpu::sigmoid(g[i]);
      }
    }
  });
  return {};
}

}  // namespace rill::backend
