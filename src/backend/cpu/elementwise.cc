// Embedding, residual adds, gates, GLU activations, row gathers.
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace rill::backend {

using cpu::row_f32;

Status CpuBackend::embed_impl(const EmbedArgs& a) {
  const int64_t T = a.ids.size(0), H = a.table.size(1), V = a.table.size(0);
  const int32_t* ids = a.ids.ptr<int32_t>();
  for (int64_t t = 0; t < T; ++t)
    if (ids[t] < 0 || ids[t] >= V) return out_of_range("embed: token id {} is outside the vocabulary [0, {})", ids[t], V);
  cpu::pool().parallel_for(T, 16, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) cpu::widen_row(cpu::weight_row(a.table, ids[t]), a.table.dtype, H, row_f32(a.out, t));
  });
  return {};
}

Status CpuBackend::add_impl(const AddArgs& a) {
  const int64_t M = a.inout.size(0), N = a.inout.size(1);
  for (int64_t m = 0; m < M; ++m) {
    float* y = row_f32(a.inout, m);
    const float* x = row_f32(a.x, m);
    for (int64_t n = 0; n < N; ++n) y[n] += x[n];
  }
  return {};
}

Status CpuBackend::sigmoid_gate_impl(const SigmoidGateArgs& a) {
  const int64_t M = a.inout.size(0), N = a.inout.size(1);
  for (int64_t m = 0; m < M; ++m) {
    float* y = row_f32(a.inout, m);
    const float* g = row_f32(a.gate, m);
    for (int64_t n = 0; n < N; ++n) y[n] *= cpu::sigmoid(g[n]);
  }
  return {};
}

Status CpuBackend::glu_impl(const GluArgs& a) {
  const int64_t M = a.gate.size(0), N = a.gate.size(1);
  cpu::pool().parallel_for(M, 4, [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m) {
      const float* g = row_f32(a.gate, m);
      const float* u = row_f32(a.up, m);
      float* y = row_f32(a.out, m);
      for (int64_t n = 0; n < N; ++n) {
        if (a.activation == Activation::Silu) {
          y[n] = cpu::silu(g[n]) * u[n];
        } else {  // SiTU-GLU (spec §3.6)
          const float act = a.beta * std::tanh(g[n] / a.beta) * cpu::sigmoid(g[n]);
          y[n] = act * (a.linear_beta * std::tanh(u[n] / a.linear_beta));
        }
      }
    }
  });
  return {};
}

Status CpuBackend::gather_rows_impl(const GatherRowsArgs& a) {
  const int64_t R = a.rows.size(0), N = a.x.size(1), T = a.x.size(0);
  const size_t row_bytes = size_t(N) * dtype_size(a.x.dtype);
  for (int64_t r = 0; r < R; ++r) {
    const int32_t src = a.rows.ptr<int32_t>()[r];
    if (src < 0 || src >= T) return internal_error("gather_rows: row {} outside [0, {})", src, T);
    std::memcpy(static_cast<char*>(a.out.data) + r * a.out.stride(0) * dtype_size(a.out.dtype),
                static_cast<const char*>(a.x.data) + src * a.x.stride(0) * dtype_size(a.x.dtype), row_bytes);
  }
  return {};
}

}  // namespace rill::backend
