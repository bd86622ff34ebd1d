#include "bench/serve/latency_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace rill::bench::serve {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * double(values.size() - 1);
  const size_t lo = size_t(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (rank - double(lo)) * (values[hi] - values[lo]);
}

LatencySummary summarize(const std::vector<double>& values, const std::vector<double>& percentiles) {
  LatencySummary s;
  if (!values.empty()) {
    const double n = double(values.size());
    s.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
    double sq = 0;
    for (double v : values) sq += (v - s.mean) * (v - s.mean);
    s.std = std::sqrt(sq / n);
    s.median = percentile(values, 50);
  }
  for (double p : percentiles) s.percentiles.push_back(percentile(values, p));
  return s;
}

}  // namespace rill::bench::serve
