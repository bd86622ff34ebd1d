#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace rill {
namespace {

LogLevel level_from_env() {
  const char* s = std::getenv("RILL_LOG_LEVEL");
  if (!s) return LogLevel::Info;
  if (!std::strcmp(s, "debug")) return LogLevel::Debug;
  if (!std::strcmp(s, "warn")) return LogLevel::Warn;
  if (!std::strcmp(s, "error")) return LogLevel::Error;
  return LogLevel::Info;
}

std::atomic<LogLevel>& level_ref() {
  static std::atomic<LogLevel> level{level_from_env()};
  return level;
}

}  // namespace

LogLevel log_level() { return level_ref().load(std::memory_order_relaxed); }
void set_log_level(LogLevel level) { level_ref().store(level); }

void log_line(LogLevel level, const std::string& message) {
  static std::mutex mu;
  static const auto start = std::chrono::steady_clock::now();
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const char* tag = level == LogLevel::Debug ? "debug" : level == LogLevel::Info ? "info"
                    : level == LogLevel::Warn ? "warn" : "error";
  std::lock_guard lock(mu);
  std::fprintf(stderr, "[rill %8.3fs %s] %s\n", t, tag, message.c_str());
}

}  // namespace rill
