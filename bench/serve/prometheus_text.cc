#include "bench/serve/prometheus_text.h"

#include <cstdlib>

namespace rill::bench::serve {
namespace {

bool name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool name_char(char c) {
  return name_start(c) || (c >= '0' && c <= '9');
}
void skip_blanks(std::string_view s, size_t& i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
}

// `{name="value",...}` from s[i] == '{'; leaves i after the '}'.
Status parse_labels(std::string_view s, size_t& i, std::map<std::string, std::string>& labels) {
  ++i;
  for (;;) {
    skip_blanks(s, i);
    if (i < s.size() && s[i] == '}') break;  // also after a trailing comma, which the format allows
    const size_t start = i;
    while (i < s.size() && name_char(s[i])) ++i;
    if (i == start || !name_start(s[start]))
      return invalid_argument("a label name expected at column {}", i + 1);
    const std::string key(s.substr(start, i - start));
    skip_blanks(s, i);
    if (i + 1 >= s.size() || s[i] != '=' || s[i + 1] != '"')
      return invalid_argument("label {}: =\"value\" expected", key);
    i += 2;
    std::string value;
    for (;; ++i) {
      if (i >= s.size()) return invalid_argument("label {}: unterminated value", key);
      if (s[i] == '"') break;
      if (s[i] != '\\') {
        value += s[i];
        continue;
      }
      if (++i >= s.size()) return invalid_argument("label {}: unterminated value", key);
      if (s[i] == 'n')
        value += '\n';
      else if (s[i] == '\\' || s[i] == '"')
        value += s[i];
      else
        return invalid_argument("label {}: unknown escape \\{}", key, s[i]);
    }
    ++i;  // the closing quote
    labels[key] = std::move(value);
    skip_blanks(s, i);
    if (i < s.size() && s[i] == ',') {
      ++i;
      continue;
    }
    if (i < s.size() && s[i] == '}') break;
    return invalid_argument("label {}: ',' or '}}' expected after the value", key);
  }
  ++i;
  return Status::ok_status();
}

Result<PrometheusSample> parse_sample(std::string_view s) {
  PrometheusSample out;
  size_t i = 0;
  while (i < s.size() && name_char(s[i])) ++i;
  if (i == 0 || !name_start(s[0])) return invalid_argument("a metric name expected");
  out.name = std::string(s.substr(0, i));
  skip_blanks(s, i);
  if (i < s.size() && s[i] == '{') {
    Status st = parse_labels(s, i, out.labels);
    if (!st.ok()) return st.with_context(out.name);
    skip_blanks(s, i);
  }
  const size_t start = i;
  while (i < s.size() && s[i] != ' ' && s[i] != '\t') ++i;
  const std::string value(s.substr(start, i - start));
  // strtod reads Prometheus' +Inf, -Inf and NaN (case-insensitive) as well as plain numbers.
  char* end = nullptr;
  out.value = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0')
    return invalid_argument("{}: '{}' is not a sample value", out.name, value);
  skip_blanks(s, i);
  const size_t ts = i;  // an optional integer timestamp (milliseconds), not needed here
  if (i < s.size() && s[i] == '-') ++i;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  if (i < s.size() || (ts < s.size() && i == ts + (s[ts] == '-')))
    return invalid_argument("{}: unexpected '{}' after the value", out.name, s.substr(ts));
  return out;
}

}  // namespace

Result<std::vector<PrometheusSample>> parse_prometheus_text(std::string_view text) {
  std::vector<PrometheusSample> samples;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t i = 0;
    skip_blanks(line, i);
    line.remove_prefix(i);
    if (line.empty() || line[0] == '#') continue;
    while (line.back() == ' ' || line.back() == '\t') line.remove_suffix(1);
    auto sample = parse_sample(line);
    if (!sample.ok()) return sample.status().with_context(fmt::format("/metrics line {}", line_no));
    samples.push_back(std::move(sample).value());
  }
  return samples;
}

std::optional<double> sum_samples(const std::vector<PrometheusSample>& samples, std::string_view name) {
  std::optional<double> sum;
  for (const PrometheusSample& s : samples)
    if (s.name == name) sum = sum.value_or(0) + s.value;
  return sum;
}

}  // namespace rill::bench::serve
