#include "bench/serve/arrivals.h"

#include <cmath>
#include <random>

namespace rill::bench::serve {

Result<std::vector<double>> arrival_times(int n_requests, double request_rate, double burstiness,
                                          uint64_t seed) {
  if (!(request_rate > 0))
    return invalid_argument("--request-rate: must be > 0 or inf, got {}", request_rate);
  if (!(burstiness > 0) || std::isinf(burstiness))
    return invalid_argument("--burstiness: must be a finite number > 0, got {}", burstiness);
  std::vector<double> at(size_t(std::max(n_requests, 0)), 0.0);
  if (std::isinf(request_rate)) return at;
  // Gamma(k, theta) has mean k * theta: theta = 1 / (rate * k) keeps the mean gap at 1 / rate for every k.
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (request_rate * burstiness));
  for (size_t i = 1; i < at.size(); ++i) at[i] = at[i - 1] + gap(rng);
  return at;
}

}  // namespace rill::bench::serve
