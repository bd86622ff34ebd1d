// The process_* metrics every Prometheus client library exports (the names prometheus_client gives vLLM's
// server): resident and virtual memory, CPU seconds, start time, open and maximum file descriptors, read
// from /proc/self at scrape time. Linux only; elsewhere (no /proc) they are left out.
#pragma once

#include <optional>
#include <string>

namespace rill::server {

struct ProcessStats {
  double resident_memory_bytes = 0, virtual_memory_bytes = 0;
  double cpu_seconds = 0;         // user + system
  double start_time_seconds = 0;  // unix time
  double open_fds = 0, max_fds = 0;
};

// Null when /proc/self/stat cannot be read.
std::optional<ProcessStats> read_process_stats();
// The Prometheus text of `stats` (no labels: they describe the process, not the model).
void render_process_stats(std::string& out, const ProcessStats& stats);

}  // namespace rill::server
