#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>
#include <memory>

namespace rill {
namespace {

std::atomic<LogLevel>& level_ref() {
  static std::atomic<LogLevel> level{[] {
    const char* s = std::getenv("RILL_LOG_LEVEL");
    return s ? parse_log_level(s).value_or(LogLevel::Info) : LogLevel::Info;
  }()};
  return level;
}

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::Debug:
      return spdlog::level::debug;
    case LogLevel::Info:
      return spdlog::level::info;
    case LogLevel::Warn:
      return spdlog::level::warn;
    case LogLevel::Error:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

// Not registered in spdlog's global registry: rill filters by level itself (log_at), so the logger passes
// everything it is given; the colour sink colours the level only when stderr is a terminal.
spdlog::logger& logger() {
  static const std::shared_ptr<spdlog::logger> l = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    auto out = std::make_shared<spdlog::logger>("rill", std::move(sink));
    out->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %^%-7l%$ %v", spdlog::pattern_time_type::utc);
    out->set_level(spdlog::level::trace);
    out->flush_on(spdlog::level::trace);  // stderr lines are read live by people and by tests
    return out;
  }();
  return *l;
}

}  // namespace

LogLevel log_level() { return level_ref().load(std::memory_order_relaxed); }
void set_log_level(LogLevel level) { level_ref().store(level); }

std::optional<LogLevel> parse_log_level(std::string_view name) {
  if (name == "debug") return LogLevel::Debug;
  if (name == "info") return LogLevel::Info;
  if (name == "warning" || name == "warn") return LogLevel::Warn;
  if (name == "error") return LogLevel::Error;
  return std::nullopt;
}

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::Debug:
      return "debug";
    case LogLevel::Info:
      return "info";
    case LogLevel::Warn:
      return "warning";
    case LogLevel::Error:
      return "error";
  }
  return "info";
}

void log_line(LogLevel level, const std::string& message) {
  logger().log(to_spdlog(level), message);
}

}  // namespace rill
