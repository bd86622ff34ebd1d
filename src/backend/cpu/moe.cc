// MoE routing and expert execution on the CPU (spec §3.5-§3.6).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"
#include "backend/cpu/weight_rows.h"

namespace rill::backend {
namespace {

// Indices of the k largest values; ties go to the lower index (a deterministic choice; the reference's
// torch.topk leaves ties unspecified).
std::vector<int> top_indices(const std::vector<float>& v, int k) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

// The id moe_experts sees: global, or under expert parallelism local to this rank (-1: held elsewhere).
int32_t local_id(const MoeRouteArgs& a, int32_t id) {
  if (a.n_local == 0) return id;
  const int32_t local = id - a.expert_begin;
  return local >= 0 && local < a.n_local ? local : -1;
}

void route_token(const MoeRouteArgs& a, const float* x, const std::vector<float>& gate, int64_t t) {
  const int64_t E = a.gate_weight.size(0), H = a.x.size(1);
  std::vector<float> score(static_cast<size_t>(E)), sel(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) score[e] = cpu::dot(x, &gate[size_t(e * H)], H);
  if (a.softmax) {
    const float mx = *std::max_element(score.begin(), score.end());
    double sum = 0;
    for (float& s : score) sum += (s = std::exp(s - mx));
    for (float& s : score) s = float(s / sum);
  } else {
    for (float& s : score) s = cpu::sigmoid(s);
  }
  for (int64_t e = 0; e < E; ++e) sel[e] = score[e] + (a.bias.empty() ? 0.0f : a.bias.ptr<float>()[e]);
  if (a.n_groups > 1 && a.topk_group < a.n_groups) {
    // Group score = sum of its two best biased scores; keep the topk_group best groups.
    const int64_t per = E / a.n_groups;
    std::vector<float> group_score(static_cast<size_t>(a.n_groups));
    for (int gi = 0; gi < a.n_groups; ++gi) {
      std::vector<float> g(sel.begin() + gi * per, sel.begin() + (gi + 1) * per);
      std::partial_sort(g.begin(), g.begin() + 2, g.end(), std::greater<float>());
      group_score[gi] = g[0] + g[1];
    }
    std::vector<char> keep(static_cast<size_t>(a.n_groups), 0);
    for (int gi : top_indices(group_score, a.topk_group)) keep[gi] = 1;
    for (int64_t e = 0; e < E; ++e)
      if (!keep[e / per]) sel[e] = -INFINITY;
  }
  const std::vector<int> idx = top_indices(sel, a.top_k);
  float wsum = 0;
  for (int j = 0; j < a.top_k; ++j) wsum += score[idx[j]];
  for (int j = 0; j < a.top_k; ++j) {
    float w = score[idx[j]];  // unbiased score (spec §8.1)
    if (a.renormalize && a.top_k > 1) w /= (wsum + 1e-20f);
    a.ids.ptr<int32_t>()[t * a.ids.stride(0) + j] = local_id(a, idx[j]);
    a.weights.ptr<float>()[t * a.weights.stride(0) + j] = w * a.scaling;
  }
}

// Row r of one expert matrix (stacked [E, rows, cols], scales [E, ...]) widened into dst.
void expert_row(const TensorView& stacked, const TensorView& scales, const ExpertWeights& ex, int e, int64_t r,
                float* dst) {
  LinearWeight w{stacked.narrow(0, e, 1).reshape({stacked.size(1), stacked.size(2)}), {}, ex.format, ex.block};
  if (ex.format != WeightFormat::Dense) w.scales = scales.narrow(0, e, 1).reshape({scales.size(1), scales.size(2)});
  cpu::linear_row(w, r, dst);
}

}  // namespace

Status CpuBackend::moe_route_impl(const MoeRouteArgs& a) {
  const int64_t T = a.x.size(0), E = a.gate_weight.size(0), H = a.x.size(1);
  std::vector<float> gate(static_cast<size_t>(E * H));
  for (int64_t e = 0; e < E; ++e) cpu::widen_row(cpu::weight_row(a.gate_weight, e), a.gate_weight.dtype, H, &gate[e * H]);
  cpu::pool().parallel_for(T, 4, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) route_token(a, cpu::row_f32(a.x, t), gate, t);
  });
  return {};
}

Status CpuBackend::moe_experts_impl(const MoeExpertsArgs& a) {
  const ExpertWeights& ex = *a.experts;
  const int64_t T = a.x.size(0), Hx = ex.width(), I = ex.intermediate(), k = a.ids.size(1);
  cpu::pool().parallel_for(T, 1, [&](int64_t b, int64_t e) {
    std::vector<float> wrow(static_cast<size_t>(std::max(Hx, I))), h(static_cast<size_t>(I)), acc(static_cast<size_t>(Hx));
    for (int64_t t = b; t < e; ++t) {
      const float* x = cpu::row_f32(a.x, t);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        const int ex_id = a.ids.ptr<int32_t>()[t * a.ids.stride(0) + j];
        if (ex_id < 0 || ex_id >= ex.n_experts()) continue;  // held by another rank
        const float w = a.weights.ptr<float>()[t * a.weights.stride(0) + j];
        for (int64_t i = 0; i < I; ++i) {
          expert_row(ex.gate_up, ex.gate_up_scales, ex, ex_id, i, wrow.data());
          const float gt = cpu::dot(x, wrow.data(), Hx);
          expert_row(ex.gate_up, ex.gate_up_scales, ex, ex_id, I + i, wrow.data());
          const float up = cpu::dot(x, wrow.data(), Hx);
          h[i] = a.activation == Activation::Silu
                     ? cpu::silu(gt) * up
                     : (a.beta * std::tanh(gt / a.beta) * cpu::sigmoid(gt)) * (a.linear_beta * std::tanh(up / a.linear_beta));
        }
        for (int64_t o = 0; o < Hx; ++o) {
          expert_row(ex.down, ex.down_scales, ex, ex_id, o, wrow.data());
          acc[o] += w * cpu::dot(h.data(), wrow.data(), I);
        }
      }
      float* y = cpu::row_f32(a.out, t);
      for (int64_t o = 0; o < Hx; ++o) y[o] = acc[o];
    }
  });
  return {};
}

}  // namespace rill::backend
