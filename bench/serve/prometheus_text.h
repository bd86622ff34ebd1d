// The Prometheus text exposition format (0.0.4), read back: `rill bench serve` scrapes the server's /metrics
// before and after a run and reports what moved (the speculative-decoding counters, as vLLM's bench does).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace rill::bench::serve {

struct PrometheusSample {
  std::string name;                           // as written, with its _total / _bucket / ... suffix
  std::map<std::string, std::string> labels;  // values unescaped (\\, \", \n)
  double value = 0;                           // +Inf, -Inf and NaN included
};

// Every sample line of `text`; # comments (HELP, TYPE) and blank lines are skipped, an optional timestamp
// after the value is ignored. A malformed line is an InvalidArgument naming its line number.
Result<std::vector<PrometheusSample>> parse_prometheus_text(std::string_view text);

// The sum over every label set of the samples named `name` (a server may label by model); nullopt if none.
std::optional<double> sum_samples(const std::vector<PrometheusSample>& samples, std::string_view name);

}  // namespace rill::bench::serve
