#include "backend/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/rng.h"

namespace rill::backend {

int32_t sample_row(const float* logits, int32_t V, const SamplingRow& row) {
  if (is_greedy(row)) {
    int32_t best = 0;
    for (int32_t i = 1; i < V; ++i)
      if (logits[i] > logits[best]) best = i;
    return best;
  }
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const int32_t k = row.top_k > 0 ? std::min(row.top_k, V) : V;
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), by_logit);
  order.resize(size_t(k));
  const float mx = logits[order[0]];
  std::vector<double> p(order.size());
  double sum = 0;
  for (size_t i = 0; i < order.size(); ++i) sum += (p[i] = std::exp(double(logits[order[i]] - mx) / row.temperature));
  for (double& x : p) x /= sum;
  size_t keep = p.size();
  if (row.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      cum += p[i];
      if (cum >= row.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (row.min_p > 0.0f) {
    const double cut = row.min_p * p[0];
    size_t n = 1;
    while (n < keep && p[n] >= cut) ++n;
    keep = n;
  }
  double mass = 0;
  for (size_t i = 0; i < keep; ++i) mass += p[i];
  const double u = double(uniform01(row.seed, row.counter)) * mass;
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += p[i];
    if (u < cum) return order[i];
  }
  return order[keep - 1];
}

}  // namespace rill::backend
