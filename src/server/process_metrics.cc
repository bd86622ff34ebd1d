#include "server/process_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

namespace rill::server {
namespace {

// btime: the boot time in unix seconds (the base of /proc/self/stat's starttime).
std::optional<double> boot_time() {
  std::ifstream in("/proc/stat");
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime" && in >> value) return value;
    in.ignore(1 << 20, '\n');
  }
  return std::nullopt;
}

}  // namespace

std::optional<ProcessStats> read_process_stats() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  // Field 2 (comm) is in parentheses and may hold spaces: the numeric fields start after the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 2));
  std::vector<std::string> f;  // f[0] is field 3 (state)
  for (std::string tok; rest >> tok;) f.push_back(tok);
  if (f.size() < 22) return std::nullopt;
  const double ticks = double(sysconf(_SC_CLK_TCK));
  const double page = double(sysconf(_SC_PAGESIZE));
  ProcessStats s;
  s.cpu_seconds = (std::stod(f[11]) + std::stod(f[12])) / ticks;  // utime, stime (fields 14, 15)
  s.virtual_memory_bytes = std::stod(f[20]);                      // vsize (field 23)
  s.resident_memory_bytes = std::stod(f[21]) * page;              // rss in pages (field 24)
  if (auto btime = boot_time()) s.start_time_seconds = *btime + std::stod(f[19]) / ticks;  // field 22
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    s.open_fds += 1;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0) s.max_fds = double(lim.rlim_cur);
  return s;
}

void render_process_stats(std::string& out, const ProcessStats& s) {
  auto one = [&](const char* name, const char* type, const char* help, double value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
  };
  one("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", s.virtual_memory_bytes);
  one("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", s.resident_memory_bytes);
  one("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.",
      s.start_time_seconds);
  one("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
      s.cpu_seconds);
  one("process_open_fds", "gauge", "Number of open file descriptors.", s.open_fds);
  one("process_max_fds", "gauge", "Maximum number of open file descriptors.", s.max_fds);
}

}  // namespace rill::server
