// The statistics `rill bench serve` reports, computed as vLLM does with numpy: mean, median, population
// standard deviation and percentiles with linear interpolation between the closest ranks (numpy's default).
#pragma once

#include <vector>

namespace rill::bench::serve {

// The p-th percentile (0..100) of `values`: rank p/100 * (n - 1) in sorted order, interpolated linearly.
// 0 for an empty list (vLLM reports 0 where no request produced a value).
double percentile(std::vector<double> values, double p);

struct LatencySummary {
  double mean = 0, median = 0, std = 0;
  std::vector<double> percentiles;  // one per requested percentile, same order
};
LatencySummary summarize(const std::vector<double>& values, const std::vector<double>& percentiles);

}  // namespace rill::bench::serve
