// core/log.h on spdlog: the level names, the filter, and the line format (UTC ISO-8601 time with ms, then the
// level) checked against the wall clock the test reads itself.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <regex>
#include <string>

#include "core/log.h"

namespace rill {
namespace {

TEST(Log, ParsesTheLevelNames) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::Debug);
  EXPECT_EQ(parse_log_level("info"), LogLevel::Info);
  EXPECT_EQ(parse_log_level("warning"), LogLevel::Warn);
  EXPECT_EQ(parse_log_level("warn"), LogLevel::Warn);
  EXPECT_EQ(parse_log_level("error"), LogLevel::Error);
  EXPECT_EQ(parse_log_level("verbose"), std::nullopt);
  EXPECT_EQ(parse_log_level(""), std::nullopt);
  for (LogLevel l : {LogLevel::Debug, LogLevel::Info, LogLevel::Warn, LogLevel::Error})
    EXPECT_EQ(parse_log_level(log_level_name(l)), l);
}

TEST(Log, FiltersByLevelAndStampsEachLine) {
  const LogLevel saved = log_level();
  set_log_level(LogLevel::Warn);
  testing::internal::CaptureStderr();
  // spdlog stamps lines from std::chrono::system_clock; std::time() reads glibc's coarse clock, which may
  // still show the previous second when the precise clock has passed it, so both bounds use system_clock.
  const auto seconds_now = [] {
    return std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  };
  const std::time_t before = seconds_now();
  RILL_LOG_INFO("hidden {}", 1);
  RILL_LOG_WARN("shown {}", 2);
  RILL_LOG_ERROR("also {}", 3);
  const std::time_t after = seconds_now();
  const std::string out = testing::internal::GetCapturedStderr();
  set_log_level(saved);

  EXPECT_EQ(out.find("hidden"), std::string::npos) << out;
  const std::regex line(R"((\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.\d{3}Z (warning|error) +(shown 2|also 3)\n)");
  auto it = std::sregex_iterator(out.begin(), out.end(), line);
  int n = 0;
  for (; it != std::sregex_iterator(); ++it, ++n) {
    std::tm tm{};
    ASSERT_NE(strptime((*it)[1].str().c_str(), "%Y-%m-%dT%H:%M:%S", &tm), nullptr);
    const std::time_t t = timegm(&tm);
    EXPECT_GE(t, before);
    EXPECT_LE(t, after);
  }
  EXPECT_EQ(n, 2) << out;
}

}  // namespace
}  // namespace rill
