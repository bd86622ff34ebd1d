// When each request of `rill bench serve` is sent: vLLM's arrival process. Inter-arrival gaps are gamma
// distributed with shape `burstiness` and mean 1/rate, so burstiness 1 is a Poisson process (exponential
// gaps), below 1 burstier, above 1 more regular; rate = inf sends everything at once.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace rill::bench::serve {

// Seconds after the start at which request i arrives: 0 for the first, then cumulative gaps. Errors name
// --request-rate or --burstiness.
Result<std::vector<double>> arrival_times(int n_requests, double request_rate, double burstiness,
                                          uint64_t seed);

}  // namespace rill::bench::serve
