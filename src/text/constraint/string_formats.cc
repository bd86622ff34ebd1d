// What each pattern admits (the subset where the format is wider):
// - date (RFC 3339 full-date): YYYY-MM-DD with the days of each month; 29 February only in leap years
//   (divisible by 4 and not by 100, or by 400). time: HH:MM:SS, optional fraction, then "Z" or ±HH:MM (RFC
//   3339 full-time needs the offset; no leap second 60, no lower-case "z"). date-time: date "T" time.
// - uuid: lower-case 8-4-4-4-12 hex. ipv4: dotted decimal without leading zeros. ipv6: the full
//   eight-group form (no "::"), lower-case.
// - email: a practical subset of RFC 5321: dot-separated atoms of [A-Za-z0-9_+-], "@", dot-separated
//   host labels, and a top-level label of two or more letters.
// - hostname: one to three labels of [a-z0-9-] (63 characters at most, no hyphen at either end), so the
//   name stays under RFC 1123's 253 characters.
// - uri: http or https, "://", a hostname, then path segments and a query of unreserved characters.
#include "text/constraint/string_formats.h"

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace rill::text::constraint {
namespace {

constexpr std::string_view kDate =
    "([0-9]{4}-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|[0-9]{4}-(0[469]|11)-(0[1-9]|[12][0-9]|30)|"
    "[0-9]{4}-02-(0[1-9]|1[0-9]|2[0-8])|"
    "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[048]|[2468][048]|[13579][26])00)-02-29)";
constexpr std::string_view kTime =
    "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
constexpr std::string_view kLabel = "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?";
constexpr std::string_view kOctet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";

std::string cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out += p;
  return out;
}

const std::vector<std::pair<std::string_view, std::string>>& formats() {
  static const auto* table = [] {
    const std::string hostname = cat({kLabel, "(\\.", kLabel, "){0,2}"});
    return new std::vector<std::pair<std::string_view, std::string>>{
        {"date", std::string(kDate)},
        {"time", std::string(kTime)},
        {"date-time", cat({kDate, "T", kTime})},
        {"uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"},
        {"ipv4", cat({kOctet, "(\\.", kOctet, "){3}"})},
        {"ipv6", "[0-9a-f]{1,4}(:[0-9a-f]{1,4}){7}"},
        {"email",
         "[A-Za-z0-9_+-]+(\\.[A-Za-z0-9_+-]+)*@([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\\.)+[A-Za-z]{2,}"},
        {"hostname", hostname},
        {"uri", cat({"https?://", hostname, "(/[A-Za-z0-9._~-]*)*(\\?[A-Za-z0-9._~=&-]*)?"})},
    };
  }();
  return *table;
}

}  // namespace

std::optional<std::string_view> string_format_pattern(std::string_view format) {
  for (const auto& [name, pattern] : formats())
    if (name == format) return std::string_view(pattern);
  return std::nullopt;
}

std::string_view string_format_names() {
  return "date, time, date-time, uuid, ipv4, ipv6, email, hostname, uri";
}

}  // namespace rill::text::constraint
