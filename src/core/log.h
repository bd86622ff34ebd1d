// Leveled logging to stderr on spdlog (log.cc): every line carries the wall-clock time (ISO-8601, UTC, ms)
// and the level. The level comes from RILL_LOG_LEVEL=debug|info|warning|error (default info) until a
// command's --log-level sets it. The header stays spdlog-free so the RILL_LOG_* call sites compile fast.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace rill {

enum class LogLevel { Debug, Info, Warn, Error };

LogLevel log_level();
void set_log_level(LogLevel level);
// "debug", "info", "warning" (or "warn"), "error"; nullopt for anything else.
std::optional<LogLevel> parse_log_level(std::string_view name);
const char* log_level_name(LogLevel level);  // "debug", "info", "warning", "error"
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
