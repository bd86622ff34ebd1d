#include "server/http/memory_budget.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace rill::server {
namespace {

// A "Name:   N kB" line of a /proc file, in bytes; 0 when missing.
size_t proc_kib_field(const char* file, const std::string& name) {
  std::ifstream in(file);
  std::string key, unit;
  size_t value = 0;
  while (in >> key >> value >> unit)
    if (key == name + ":") return value << 10;
  return 0;
}

}  // namespace

bool MemoryBudget::try_charge(size_t bytes) {
  size_t used = in_use_.load();
  do {
    if (bytes > capacity_ || used > capacity_ - bytes) return false;
  } while (!in_use_.compare_exchange_weak(used, used + bytes));
  return true;
}

size_t default_request_memory_bytes() {
  size_t room = proc_kib_field("/proc/meminfo", "MemAvailable");
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    const size_t mapped = proc_kib_field("/proc/self/status", "VmSize");
    const size_t left = size_t(as.rlim_cur) > mapped ? size_t(as.rlim_cur) - mapped : 0;
    room = room == 0 ? left : std::min(room, left);
  }
  return std::clamp<size_t>(room / 4, size_t(256) << 20, size_t(8) << 30);
}

}  // namespace rill::server
