// Latent attention (NoPE MLA) on the CPU in the absorbed form (spec §3.4): each head attends with a
// 576-wide key [c ; k_pe] and a 512-wide value c, then W_UV maps the latent back to v_head_dim.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"
#include "backend/cpu/weight_rows.h"

namespace rill::backend {
namespace {

const float* cache_row(const TensorView& cache, const BatchLayout& l, int s, int pos) {
  const int32_t block = l.block_tables[int64_t(s) * l.max_blocks_per_seq + pos / l.block_size];
  return cache.ptr<float>() + int64_t(block) * cache.stride(0) + int64_t(pos % l.block_size) * cache.stride(1);
}

}  // namespace

Status CpuBackend::mla_cache_write_impl(const MlaCacheWriteArgs& a) {
  const BatchLayout& l = *a.layout;
  const int64_t width = a.ckv.size(1), lat = a.norm_weight.size(0);
  for (int t = 0; t < l.n_tokens; ++t) {
    const int s = l.token_seq[t], pos = l.token_pos[t];
    const int32_t block = pos / l.block_size < l.max_blocks_per_seq
                              ? l.block_tables[int64_t(s) * l.max_blocks_per_seq + pos / l.block_size]
                              : -1;  // the table is read only inside its row
    if (block < 0 || block >= a.cache.size(0))
      return internal_error("mla_cache_write: no cache block for position {} of sequence {}", pos, s);
    const float* x = cpu::row_f32(a.ckv, t);
    float* dst = a.cache.ptr<float>() + int64_t(block) * a.cache.stride(0) + (pos % l.block_size) * a.cache.stride(1);
    double ss = 0;
    for (int64_t i = 0; i < lat; ++i) ss += double(x[i]) * x[i];
    const float r = 1.0f / std::sqrt(float(ss / double(lat)) + a.eps);
    const float* w = a.norm_weight.ptr<float>();
    for (int64_t i = 0; i < lat; ++i) dst[i] = w[i] * (x[i] * r);
    for (int64_t i = lat; i < width; ++i) dst[i] = x[i];  // k_pe: neither normalised nor rotated
  }
  return {};
}

Status CpuBackend::mla_attention_impl(const MlaAttentionArgs& a) {
  const BatchLayout& l = *a.layout;
  const int nh = a.n_heads, nope = a.nope, rope = a.rope, vd = a.v_dim, R = a.kv_lora;
  // kv_b in fp32: rows [h*(nope+v), +nope) = W_UK_h, the next v rows = W_UV_h, each row R wide. A dense fp32
  // weight stored row after row is read in place; any other format is widened once per call (copying the
  // fp32 one, 1 MB at the tiny model's shape, was ~12% of a CPU decode step).
  const int64_t kvb_rows = int64_t(nh) * (nope + vd);
  const TensorView& w = a.kv_b->weight;
  const bool in_place = a.kv_b->format == WeightFormat::Dense && w.dtype == DType::F32 && w.size(0) == kvb_rows &&
                        w.size(1) == R && w.stride(1) == 1 && w.stride(0) == R;
  std::vector<float> widened;
  if (!in_place) {
    widened.resize(size_t(kvb_rows) * size_t(R));
    for (int64_t r = 0; r < kvb_rows; ++r) cpu::linear_row(*a.kv_b, r, &widened[size_t(r * R)]);
  }
  const float* kvb = in_place ? w.ptr<float>() : widened.data();
  cpu::pool().parallel_for(int64_t(l.n_tokens) * nh, 1, [&](int64_t b, int64_t e) {
    std::vector<float> q_lat(static_cast<size_t>(R)), scores, lat(static_cast<size_t>(R));
    for (int64_t job = b; job < e; ++job) {
      const int t = int(job / nh), h = int(job % nh);
      const int s = l.token_seq[t], pos = l.token_pos[t];
      const float* q = a.q.ptr<float>() + t * a.q.stride(0) + h * a.q.stride(1);
      const float* wuk = &kvb[size_t(h) * (nope + vd) * R];
      const float* wuv = wuk + size_t(nope) * R;
      // q_lat = W_UK_h^T q_nope
      std::fill(q_lat.begin(), q_lat.end(), 0.0f);
      for (int i = 0; i < nope; ++i)
        for (int r = 0; r < R; ++r) q_lat[r] += wuk[size_t(i) * R + r] * q[i];
      scores.resize(static_cast<size_t>(pos + 1));
      float mx = -INFINITY;
      for (int u = 0; u <= pos; ++u) {
        const float* kv = cache_row(a.cache, l, s, u);
        scores[u] = a.scale * (cpu::dot(q_lat.data(), kv, R) + cpu::dot(q + nope, kv + R, rope));
        mx = std::max(mx, scores[u]);
      }
      double sum = 0;
      for (int u = 0; u <= pos; ++u) sum += (scores[u] = std::exp(scores[u] - mx));
      std::fill(lat.begin(), lat.end(), 0.0f);
      for (int u = 0; u <= pos; ++u) {
        const float p = float(scores[u] / sum);
        const float* kv = cache_row(a.cache, l, s, u);
        for (int r = 0; r < R; ++r) lat[r] += p * kv[r];
      }
      float* out = cpu::row_f32(a.out, t) + int64_t(h) * vd;
      for (int j = 0; j < vd; ++j) out[j] = cpu::dot(wuv + size_t(j) * R, lat.data(), R);
    }
  });
  return {};
}

}  // namespace rill::backend
