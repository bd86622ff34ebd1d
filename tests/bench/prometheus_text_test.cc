// The exposition-format parser on hand-written /metrics text: comments, labels with escapes and commas,
// special values, timestamps, sums over label sets, and malformed lines named by number.
#include <gtest/gtest.h>

#include <cmath>

#include "bench/serve/prometheus_text.h"

namespace rill::bench::serve {
namespace {

constexpr const char* kExposition = R"(# HELP rill:requests Requests.
# TYPE rill:requests counter
rill:requests_total{model_name="a"} 3
rill:requests_total{model_name="b",route="/v1/completions"} 4.5

  # an indented comment, then a blank line with blanks

rill:odd{path="C:\\dir",quote="say \"hi\"",nl="x\ny",comma="a,b}c",} 1e3
rill:up 1 1700000000000
rill:neg_ts -2 -17
rill:empty{} 0
rill:inf{le="+Inf"} +Inf
rill:minus_inf -Inf
rill:nan NaN
rill:crlf 7)"
                                    "\r\n";

TEST(PrometheusText, ParsesSamplesLabelsAndValues) {
  auto samples = parse_prometheus_text(kExposition);
  ASSERT_TRUE(samples.ok()) << samples.status().to_string();
  ASSERT_EQ(samples->size(), 10u);
  const auto& s = *samples;
  EXPECT_EQ(s[0].name, "rill:requests_total");
  EXPECT_EQ(s[0].labels, (std::map<std::string, std::string>{{"model_name", "a"}}));
  EXPECT_EQ(s[0].value, 3);
  EXPECT_EQ(s[1].labels.at("route"), "/v1/completions");
  EXPECT_EQ(s[1].value, 4.5);
  EXPECT_EQ(s[2].name, "rill:odd");
  EXPECT_EQ(s[2].labels.at("path"), "C:\\dir");
  EXPECT_EQ(s[2].labels.at("quote"), "say \"hi\"");
  EXPECT_EQ(s[2].labels.at("nl"), "x\ny");
  EXPECT_EQ(s[2].labels.at("comma"), "a,b}c");
  EXPECT_EQ(s[2].value, 1000);
  EXPECT_EQ(s[3].value, 1);  // the timestamp is not the value
  EXPECT_EQ(s[4].value, -2);
  EXPECT_TRUE(s[5].labels.empty());
  EXPECT_TRUE(std::isinf(s[6].value) && s[6].value > 0);
  EXPECT_EQ(s[6].labels.at("le"), "+Inf");
  EXPECT_TRUE(std::isinf(s[7].value) && s[7].value < 0);
  EXPECT_TRUE(std::isnan(s[8].value));
  EXPECT_EQ(s[9].name, "rill:crlf");
  EXPECT_EQ(s[9].value, 7);

  EXPECT_EQ(sum_samples(s, "rill:requests_total"), 7.5);  // over both model_name label sets
  EXPECT_EQ(sum_samples(s, "rill:requests"), std::nullopt);
  EXPECT_EQ(sum_samples(s, "rill:empty"), 0.0);  // present with value 0 is not absent
}

TEST(PrometheusText, EmptyTextHasNoSamples) {
  auto samples = parse_prometheus_text("");
  ASSERT_TRUE(samples.ok());
  EXPECT_TRUE(samples->empty());
  samples = parse_prometheus_text("# only comments\n\n");
  ASSERT_TRUE(samples.ok());
  EXPECT_TRUE(samples->empty());
}

TEST(PrometheusText, MalformedLinesAreNamedByNumber) {
  const std::pair<const char*, const char*> cases[] = {
      {"ok 1\nno_value\n", "line 2"},
      {"ok 1\nok 2\n3starts_with_digit 1\n", "line 3"},
      {"x{a=\"1\" 2\n", "line 1"},             // no closing brace
      {"x{a=\"1} 2\n", "unterminated"},        // no closing quote
      {"x{a=1} 2\n", "=\"value\""},            // unquoted label value
      {"x{a=\"\\t\"} 2\n", "unknown escape"},  // only \\, \" and \n
      {"x{=\"1\"} 2\n", "label name"},
      {"x 1.5.2\n", "not a sample value"},
      {"x 1 12ab\n", "after the value"},  // a timestamp is an integer
      {"x 1 2 3\n", "after the value"},
  };
  for (const auto& [text, expected] : cases) {
    auto samples = parse_prometheus_text(text);
    ASSERT_FALSE(samples.ok()) << text;
    EXPECT_NE(samples.status().message().find(expected), std::string::npos)
        << text << " -> " << samples.status().to_string();
    EXPECT_NE(samples.status().message().find("/metrics line"), std::string::npos)
        << samples.status().to_string();
  }
}

}  // namespace
}  // namespace rill::bench::serve
