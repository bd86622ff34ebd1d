// Minimal leveled logging to stderr (RILL_LOG_LEVEL=debug|info|warn|error; default info).
#pragma once

#include <fmt/format.h>

namespace rill {

enum class LogLevel { Debug, Info, Warn, Error };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_line(LogLevel level, const std::string& message);

template <typename... Args>
void log_at(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level < log_level()) return;
  log_line(level, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace rill

#define RILL_LOG_DEBUG(...) ::rill::log_at(::rill::LogLevel::Debug, __VA_ARGS__)
#define RILL_LOG_INFO(...) ::rill::log_at(::rill::LogLevel::Info, __VA_ARGS__)
#define RILL_LOG_WARN(...) ::rill::log_at(::rill::LogLevel::Warn, __VA_ARGS__)
#define RILL_LOG_ERROR(...) ::rill::log_at(::rill::LogLevel::Error, __VA_ARGS__)
