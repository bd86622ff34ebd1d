// Patterns (regex.h) against std::wregex's ECMAScript engine on code points: for each pattern, every string
// of up to three characters over a small alphabet (quotes, backslash, controls and a non-ASCII letter
// included) is accepted, in its JSON spelling, exactly when std::regex_match matches it; random walks from
// the grammar match too (and so also contain a match, the unanchored JSON Schema meaning). Then length
// narrowing, errors, and the string formats checked by the C++ calendar, inet_pton and regexes written
// from the formats' RFCs / ajv-formats' definitions. RILL_TEST_SEED replays the walks.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "test_seed.h"
#include "text/constraint/regex.h"
#include "text/constraint/string_formats.h"

namespace rill::text::constraint {
namespace {

std::shared_ptr<const Grammar> pattern_grammar(std::string_view pattern, int32_t min_chars = 0,
                                               int32_t max_chars = -1) {
  auto regex = parse_regex(pattern);
  if (!regex.ok()) {
    ADD_FAILURE() << pattern << ": " << regex.status().to_string();
    return nullptr;
  }
  auto fitted = fit_length(*regex, min_chars, max_chars);
  if (!fitted.ok()) {
    ADD_FAILURE() << pattern << ": " << fitted.status().to_string();
    return nullptr;
  }
  GrammarBuilder b;
  auto g = b.build(json_string_node(b, *fitted));
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return *g;
}

// The string's JSON spelling (nlohmann's, the one the grammar offers) is accepted whole.
bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& utf8) {
  Matcher m(g);
  return m.advance_bytes(nlohmann::json(utf8).dump()) && m.is_complete();
}

std::wstring widen(const std::string& utf8) {
  std::wstring out;
  for (size_t i = 0; i < utf8.size();) {
    const uint8_t b = uint8_t(utf8[i]);
    const int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    uint32_t c = n == 1 ? b : n == 2 ? b & 0x1F : n == 3 ? b & 0x0F : b & 0x07;
    for (int k = 1; k < n; ++k) c = (c << 6) | (uint8_t(utf8[i + size_t(k)]) & 0x3F);
    out.push_back(wchar_t(c));
    i += size_t(n);
  }
  return out;
}

std::string walk(const std::shared_ptr<const Grammar>& g, std::mt19937& rng) {
  Matcher m(g);
  std::string text;
  while (text.size() < 300) {
    std::vector<int> next;
    for (int c = 0; c < 256; ++c)
      if (m.can_advance(c)) next.push_back(c);
    if (m.is_complete() && (next.empty() || rng() % 6 == 0)) return text;
    if (next.empty()) break;
    // Prefer ASCII half of the time so escapes and literals both show up.
    std::vector<int> ascii;
    for (int c : next)
      if (c < 0x80) ascii.push_back(c);
    const std::vector<int>& pool = !ascii.empty() && rng() % 2 ? ascii : next;
    const int c = pool[rng() % pool.size()];
    EXPECT_TRUE(m.advance(c));
    text.push_back(char(c));
  }
  return "";  // too long: skipped
}

// The decoded string of a JSON string literal.
std::string decode(const std::string& json_text) {
  return nlohmann::json::parse(json_text).get<std::string>();
}

uint32_t seed_for(const char* what) {
  const uint32_t seed = rill::testing::test_seed();
  std::printf("[ regex ] %s: seed %u (RILL_TEST_SEED=%u replays it)\n", what, seed, seed);
  return seed;
}

TEST(Regex, AgreesWithStdRegexOnEveryShortString) {
  const std::vector<std::string> alphabet = {"a", "b",  "c",  "0",  "7",  "-", "_",   ".",
                                             " ", "\t", "\n", "\"", "\\", "é", "\x01"};
  std::vector<std::string> strings = {""};
  for (size_t len = 1, begin = 0; len <= 3; ++len) {
    const size_t end = strings.size();
    for (size_t i = begin; i < end; ++i)
      for (const std::string& c : alphabet) strings.push_back(strings[i] + c);
    begin = end;
  }
  const char* patterns[] = {"^[a-c]+$",
                            "ab|c0",
                            "a(b|c)*-",
                            "[^a]b?",
                            "\\d{2,3}",
                            "(ab){1,2}c?",
                            "a.c",
                            "[\\w-]{0,3}",
                            "x?a+b*",
                            "[a\\-c]",
                            "\\.",
                            "a{2}",
                            "a{2,}",
                            "(?:ab)+",
                            "(?:a)b",
                            "[^\\d]",
                            "\\D\\W?",
                            "\\s",
                            "[\\s\\S]",
                            "^a|b$",
                            "a*?b",
                            "[\"\\\\]+",
                            "\\\\",
                            ".",
                            "[^\\n]*",
                            "\\u00e9|\\x01",
                            "[\\u0000-\\u001f]",
                            "(a|)b",
                            "[.][.]",
                            "\\t\\n",
                            "[b-c\\d]{1,3}$",
                            "é+",
                            "[^é\\\\\"]"};
  for (const char* pattern : patterns) {
    SCOPED_TRACE(pattern);
    const auto g = pattern_grammar(pattern);
    ASSERT_TRUE(g);
    const std::wregex re(widen(pattern), std::regex::ECMAScript);
    for (const std::string& s : strings)
      ASSERT_EQ(accepts(g, s), std::regex_match(widen(s), re)) << nlohmann::json(s).dump();
  }
}

TEST(Regex, RandomWalksMatch) {
  std::mt19937 rng(seed_for("pattern walks"));
  const char* patterns[] = {"^[A-Z][a-z]{1,8}( [A-Z][a-z]{1,8})*$",
                            "\\d{3}-\\d{4}",
                            "(\\w+\\.)+\\w{2,4}",
                            "[^\\s]{2,10}",
                            ".{0,12}",
                            "([0-9a-f]{2}:){5}[0-9a-f]{2}",
                            "(ab|c[de]?)+x?",
                            "[\\u4e00-\\u9fff]{1,3}",
                            "[^a-z]+"};
  for (const char* pattern : patterns) {
    SCOPED_TRACE(pattern);
    const auto g = pattern_grammar(pattern);
    ASSERT_TRUE(g);
    const std::wregex re(widen(pattern), std::regex::ECMAScript);
    for (int i = 0; i < 200; ++i) {
      const std::string text = walk(g, rng);
      if (text.empty()) continue;
      const std::wstring s = widen(decode(text));
      EXPECT_TRUE(std::regex_match(s, re)) << text;
      EXPECT_TRUE(std::regex_search(s, re)) << text;
    }
  }
}

TEST(Regex, NonAsciiRangesAreUtf8Exact) {
  // Ranges that cross UTF-8 length and lead-byte boundaries: each code point near an end is tried.
  const std::pair<uint32_t, uint32_t> ranges[] = {{0x7E, 0x81},        {0x7FF, 0x800},    {0xFFF, 0x1001},
                                                  {0xD7FF, 0xE000},    {0xFFFD, 0x10001}, {0x10FFF, 0x11000},
                                                  {0x10FFFE, 0x10FFFF}};
  for (const auto& [lo, hi] : ranges) {
    const std::string pattern = fmt::format("[\\u{{{:x}}}-\\u{{{:x}}}]", lo, hi);
    SCOPED_TRACE(pattern);
    const auto g = pattern_grammar(pattern);
    ASSERT_TRUE(g);
    for (uint32_t c = lo >= 3 ? lo - 3 : 0; c <= std::min<uint32_t>(hi + 3, 0x10FFFF); ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      std::string s;
      if (c < 0x80)
        s = std::string(1, char(c));
      else if (c < 0x800)
        s = {char(0xC0 | (c >> 6)), char(0x80 | (c & 0x3F))};
      else if (c < 0x10000)
        s = {char(0xE0 | (c >> 12)), char(0x80 | ((c >> 6) & 0x3F)), char(0x80 | (c & 0x3F))};
      else
        s = {char(0xF0 | (c >> 18)), char(0x80 | ((c >> 12) & 0x3F)), char(0x80 | ((c >> 6) & 0x3F)),
             char(0x80 | (c & 0x3F))};
      EXPECT_EQ(accepts(g, s), c >= lo && c <= hi) << std::hex << c;
    }
  }
}

TEST(Regex, LengthNarrowing) {
  auto g = pattern_grammar("^[a-z]+$", 0, 3);
  EXPECT_TRUE(accepts(g, "abc"));
  EXPECT_FALSE(accepts(g, "abcd"));
  EXPECT_FALSE(accepts(g, ""));
  g = pattern_grammar("[A-Z]{2}\\d+", 0, 5);
  EXPECT_TRUE(accepts(g, "AB123"));
  EXPECT_FALSE(accepts(g, "AB1234"));
  g = pattern_grammar("(ab)+", 3, -1);
  EXPECT_FALSE(accepts(g, "ab"));
  EXPECT_TRUE(accepts(g, "abab"));
  g = pattern_grammar("a|bb|ccc", 0, 2);
  EXPECT_TRUE(accepts(g, "bb"));
  EXPECT_FALSE(accepts(g, "ccc"));
  g = pattern_grammar("\\d{4}", 4, 4);  // already inside
  EXPECT_TRUE(accepts(g, "2024"));
  auto error = [](const char* pattern, int32_t min, int32_t max) {
    auto r = parse_regex(pattern);
    EXPECT_TRUE(r.ok());
    auto f = fit_length(*r, min, max);
    return f.ok() ? std::string() : f.status().message();
  };
  EXPECT_NE(error("(a|bc)+", 0, 3).find("not supported"), std::string::npos);
  EXPECT_NE(error("a+b+", 0, 3).find("not supported"), std::string::npos);
  EXPECT_NE(error("abcd", 0, 3).find("no string of the pattern"), std::string::npos);
}

TEST(Regex, UnsupportedConstructsAreErrors) {
  const std::pair<const char*, const char*> cases[] = {{"a(?=b)", "lookahead"},
                                                       {"a(?!b)", "lookahead"},
                                                       {"(?<=a)b", "lookbehind"},
                                                       {"(?<!a)b", "lookbehind"},
                                                       {"(a)\\1", "backreference"},
                                                       {"(?<x>a)\\k<x>", "backreference"},
                                                       {"\\bword", "word boundary"},
                                                       {"a^b", "anchor"},
                                                       {"a$b", "anchor"},
                                                       {"(a*)*", "empty string"},
                                                       {"(a|)+", "empty string"},
                                                       {"\\p{L}", "Unicode property"},
                                                       {"[a", "unterminated"},
                                                       {"(a", "missing ')'"},
                                                       {"a)", "unmatched"},
                                                       {"*a", "nothing to repeat"},
                                                       {"a**", "nothing to repeat"},
                                                       {"a{2,1}", "m < n"},
                                                       {"[z-a]", "out of order"},
                                                       {"\\q", "unknown escape"},
                                                       {"\\cA", "control escape"},
                                                       {"a{", "does not start"},
                                                       {"\\ud800", "lone surrogate"},
                                                       {"(?x)", "unknown group"},
                                                       {"a[]", "matches nothing"},
                                                       {"[^\\s\\S]", "matches nothing"}};
  for (const auto& [pattern, what] : cases) {
    auto r = parse_regex(pattern);
    ASSERT_FALSE(r.ok()) << pattern;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << pattern << ": " << r.status().message();
  }
  EXPECT_TRUE(accepts(pattern_grammar("(?<name>a)b"), "ab"));  // a named group (std::regex has none)
  EXPECT_TRUE(parse_regex("\\ud83d\\ude00").ok());             // a surrogate pair is one character
  EXPECT_TRUE(accepts(pattern_grammar("\\ud83d\\ude00"), "😀"));
}

// ---- formats ----

std::shared_ptr<const Grammar> format_grammar(const char* name) {
  auto pattern = string_format_pattern(name);
  EXPECT_TRUE(pattern.has_value()) << name;
  return pattern_grammar(*pattern);
}

TEST(StringFormats, DatesAreCalendarDates) {
  const auto g = format_grammar("date");
  ASSERT_TRUE(g);
  for (int y : {0, 4, 1900, 1999, 2000, 2023, 2024, 2100, 2400, 9999})
    for (unsigned m = 0; m <= 13; ++m)
      for (unsigned d = 0; d <= 32; ++d) {
        const std::chrono::year_month_day ymd{std::chrono::year{y}, std::chrono::month{m},
                                              std::chrono::day{d}};
        const std::string text = fmt::format("{:04d}-{:02d}-{:02d}", y, m, d);
        ASSERT_EQ(accepts(g, text), ymd.ok()) << text;
      }
  for (const char* bad : {"2024-1-01", "24-01-01", "2024/01/01", "2024-01-01T00:00:00Z", " 2024-01-01"})
    EXPECT_FALSE(accepts(g, bad)) << bad;
}

// RFC 3339 full-time with ajv-formats' range checks (hour <= 23, minute <= 59, second < 60 here).
bool valid_time(const std::string& s) {
  static const std::regex re(R"(^(\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-](\d\d):(\d\d))$)");
  std::smatch m;
  if (!std::regex_match(s, m, re)) return false;
  auto n = [&](int i) { return std::stoi(m[i].str()); };
  if (n(1) > 23 || n(2) > 59 || n(3) > 59) return false;
  return m[6].str().empty() || (n(6) <= 23 && n(7) <= 59);
}

TEST(StringFormats, RandomWalksAreValid) {
  std::mt19937 rng(seed_for("format walks"));
  // Written from ajv-formats' full-mode definitions and RFC 3986 (uri: the generic syntax of the subset).
  const std::regex uuid("^[0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12}$", std::regex::icase);
  const std::regex email(
      "^[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[a-z0-9!#$%&'*+/"
      "=?^_`{|}~-]+)*@(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\\.)+"
      "[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$",
      std::regex::icase);
  const std::regex hostname(
      "^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\\.[a-z0-9](?:[-0-9a-z]{0,61}[0-9a-z])?)*\\.?$",
      std::regex::icase);
  const std::regex uri(
      "^[a-zA-Z][a-zA-Z0-9+.-]*://([A-Za-z0-9._~!$&'()*+,;=-]|%[0-9a-fA-F]{2})*"
      "(/([A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9a-fA-F]{2})*)*(\\?([A-Za-z0-9._~!$&'()*+,;=:@/"
      "?-]|%[0-9a-fA-F]{2})*)?$");
  const auto date = format_grammar("date");
  struct Check {
    const char* format;
    std::function<bool(const std::string&)> valid;
  };
  const std::vector<Check> checks = {
      {"date", [&](const std::string& s) { return accepts(date, s); }},  // exhaustively checked above
      {"time", valid_time},
      {"date-time",
       [&](const std::string& s) {
         const size_t t = s.find('T');
         return t != std::string::npos && accepts(date, s.substr(0, t)) && valid_time(s.substr(t + 1));
       }},
      {"uuid", [&](const std::string& s) { return std::regex_match(s, uuid); }},
      {"ipv4",
       [](const std::string& s) {
         in_addr a;
         return inet_pton(AF_INET, s.c_str(), &a) == 1;
       }},
      {"ipv6",
       [](const std::string& s) {
         in6_addr a;
         return inet_pton(AF_INET6, s.c_str(), &a) == 1;
       }},
      {"email", [&](const std::string& s) { return std::regex_match(s, email); }},
      {"hostname", [&](const std::string& s) { return s.size() <= 253 && std::regex_match(s, hostname); }},
      {"uri", [&](const std::string& s) { return std::regex_match(s, uri); }},
  };
  for (const Check& c : checks) {
    SCOPED_TRACE(c.format);
    const auto g = format_grammar(c.format);
    ASSERT_TRUE(g);
    for (int i = 0; i < 150; ++i) {
      const std::string text = walk(g, rng);
      if (text.empty()) continue;
      EXPECT_TRUE(c.valid(decode(text))) << text;
    }
  }
  EXPECT_FALSE(string_format_pattern("duration").has_value());
}

TEST(StringFormats, HandPickedStrings) {
  const auto t = format_grammar("time");
  for (const char* ok : {"00:00:00Z", "23:59:59.123+05:30", "12:00:00-00:00"})
    EXPECT_TRUE(accepts(t, ok)) << ok;
  for (const char* no : {"24:00:00Z", "12:60:00Z", "12:00:60Z", "12:00:00", "12:00:00+24:00", "12:00Z"})
    EXPECT_FALSE(accepts(t, no)) << no;
  const auto ip = format_grammar("ipv4");
  for (const char* ok : {"0.0.0.0", "255.255.255.255", "10.1.20.199"}) EXPECT_TRUE(accepts(ip, ok)) << ok;
  for (const char* no : {"256.0.0.0", "01.2.3.4", "1.2.3", "1.2.3.4.5"}) EXPECT_FALSE(accepts(ip, no)) << no;
  const auto email = format_grammar("email");
  EXPECT_TRUE(accepts(email, "first.last+tag@mail.example.com"));
  for (const char* no : {"a@b", ".a@b.com", "a..b@c.com", "a@-b.com", "@b.com"})
    EXPECT_FALSE(accepts(email, no)) << no;
}

}  // namespace
}  // namespace rill::text::constraint
