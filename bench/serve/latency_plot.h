// The latency-vs-load plot of `rill bench serve --plot`: mean and tail TTFT and TPOT against the achieved
// request rate of each --request-rate run, drawn by gnuplot (Debian's gnuplot-nox) into a PNG.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/status.h"

namespace rill::bench::serve {

struct PlotPoint {
  double achieved_rate = 0;  // completed requests per second
  double ttft_mean_ms = 0, ttft_tail_ms = 0, tpot_mean_ms = 0, tpot_tail_ms = 0;
};

// Writes `png`. Returns false (nothing written) when gnuplot is not installed; an error when it failed.
// `tail_label` names the tail percentile ("p99"); `title` goes above both panels.
Result<bool> plot_latency(std::vector<PlotPoint> points, const std::filesystem::path& png,
                          const std::string& tail_label, const std::string& title);

}  // namespace rill::bench::serve
