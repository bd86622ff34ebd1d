// parse_bounded_json: the depth limit and its error position, key order, duplicate keys and errors as
// nlohmann's own parse has them, and objects too large for ordered_json's per-key scan.
#include <gtest/gtest.h>

#include <iterator>
#include <random>
#include <string>

#include <fmt/format.h>

#include "test_seed.h"
#include "text/json/bounded_json.h"

namespace rill::text {
namespace {

using Json = nlohmann::ordered_json;

std::string nested_arrays(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

// Levels of arrays/objects, walked without recursion (the first child at each level).
int depth_of(const Json& j) {
  int depth = 0;
  for (const Json* p = &j; p->is_structured(); ++depth) {
    if (p->empty()) return depth + 1;
    p = p->is_array() ? &p->front() : &p->begin().value();
  }
  return depth;
}

std::string error_of(std::string_view text) {
  auto r = parse_bounded_json(text);
  EXPECT_FALSE(r.ok()) << text.substr(0, 80);
  return r.ok() ? "" : r.status().message();
}

TEST(BoundedJson, AcceptsTheDepthLimitAndRefusesOneMore) {
  auto ok = parse_bounded_json(nested_arrays(128));
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(depth_of(*ok), 128);
  // The 129th '[' is byte 128.
  EXPECT_EQ(error_of(nested_arrays(129)), "JSON nested deeper than 128 levels at byte 128");

  std::string objects;  // {"a":{"a":...}}: 128 objects, then 129
  for (int i = 0; i < 128; ++i) objects += "{\"a\":";
  ASSERT_TRUE(parse_bounded_json(objects + "1" + std::string(128, '}')).ok());
  EXPECT_EQ(error_of(objects + "{}" + std::string(128, '}')),
            fmt::format("JSON nested deeper than 128 levels at byte {}", 128 * 5));
}

TEST(BoundedJson, RefusesTheIssueBodyWithoutCrashing) {
  // Issue #14 item 1: 100k levels under a field of an otherwise valid request.
  const std::string prefix = R"({"messages":[{"role":"user","content":"[{ \"hi"}],"junk":)";
  const std::string body = prefix + nested_arrays(100000) + "}";
  // Level 1 is the outer '{'; the brackets in the string do not count; the 128th '[' of junk opens 129.
  EXPECT_EQ(error_of(body),
            fmt::format("JSON nested deeper than 128 levels at byte {}", prefix.size() + 127));
  EXPECT_EQ(error_of(std::string(1'000'000, '[')), "JSON nested deeper than 128 levels at byte 128");
}

// Issue #32 N2: the value count is bounded whatever the text's size; the bound is exact.
TEST(BoundedJson, BoundsTheNumberOfValues) {
  auto list = [](size_t n) {  // [0,0,...]: n + 1 values (the array counts)
    std::string t = "[";
    for (size_t i = 0; i < n; ++i) t += i ? ",0" : "0";
    return t + "]";
  };
  auto ok = parse_bounded_json(list(999), kMaxJsonDepth, 1000);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->size(), 999u);
  EXPECT_EQ(parse_bounded_json(list(1000), kMaxJsonDepth, 1000).status().message(),
            "JSON with more than 1000 values");
  EXPECT_EQ(parse_bounded_json(R"({"a":[{},{},[]],"b":"s"})", kMaxJsonDepth, 5).status().message(),
            "JSON with more than 5 values");
  EXPECT_TRUE(parse_bounded_json(R"({"a":[{},{},[]],"b":"s"})", kMaxJsonDepth, 6).ok());
  EXPECT_FALSE(parse_bounded_json(list(kMaxJsonValues)).ok());
}

TEST(BoundedJson, KeepsKeyOrderAndLastDuplicateAsNlohmannDoes) {
  for (
      const char* text : {
          R"({"z": 1, "a": 2, "m": 3})",
          R"({"a": 1, "b": 2, "a": 3})",
          R"({"a": {"x": 1}, "b": [], "a": [1, {"a": 2, "a": null}]})",
          R"([{"k": 1, "k": {"k": 2, "k": 3}}, {"": 0, "": 1}])",
          R"({"é": "\u00e9\ud83d\ude00", "n": [-0, 1e300, 18446744073709551615, -9223372036854775808, 1.5e-7]})",
          R"(  "a string"  )",
          "null",
      }) {
    auto ours = parse_bounded_json(text);
    ASSERT_TRUE(ours.ok()) << text << ": " << ours.status().message();
    const Json reference = Json::parse(text);
    EXPECT_EQ(ours->dump(), reference.dump()) << text;
  }
  auto order = parse_bounded_json(R"({"z": 1, "a": 2, "m": 3, "a": 4})");
  ASSERT_TRUE(order.ok());
  std::string keys;
  for (const auto& [k, v] : order->items()) keys += k;
  EXPECT_EQ(keys, "zam");
  EXPECT_EQ((*order)["a"], 4);
}

// Random documents with many duplicate keys (two-letter alphabet), compared with nlohmann's parse.
TEST(BoundedJson, MatchesNlohmannOnRandomDocuments) {
  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE(fmt::format("seed {}", seed));
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return int(rng() % uint32_t(n)); };
  for (int doc = 0; doc < 300; ++doc) {
    std::string text;
    std::vector<char> open;  // closing brackets still owed
    bool need_value = true;
    while (need_value || !open.empty()) {
      const bool in_object = !open.empty() && open.back() == '}';
      if (need_value) {
        const int kind = int(open.size()) < 8 ? pick(6) : 2 + pick(4);
        if (kind == 0) {
          text += '[';
          open.push_back(']');
        } else if (kind == 1) {
          text += '{';
          open.push_back('}');
        } else {
          static const char* kScalars[] = {"1", "-2.5", "\"s\"", "null", "true", "\"\\u00e9\"", "1e5", "0"};
          text += kScalars[pick(8)];
          need_value = false;
          continue;
        }
        if (pick(3) == 0) {  // empty container
          text += open.back();
          open.pop_back();
          need_value = false;
        } else if (open.back() == '}') {
          text += fmt::format("\"{}\":", "ab"[pick(2)]);
        }
        continue;
      }
      if (pick(3) == 0 && !open.empty()) {
        text += open.back();
        open.pop_back();
      } else if (!open.empty()) {
        text += in_object ? fmt::format(",\"{}\":", "ab"[pick(2)]) : ",";
        need_value = true;
      }
    }
    auto ours = parse_bounded_json(text);
    ASSERT_TRUE(ours.ok()) << text << ": " << ours.status().message();
    ASSERT_EQ(ours->dump(), Json::parse(text).dump()) << text;
  }
}

TEST(BoundedJson, ParsesHugeFlatObjectsInLinearTime) {
  // ordered_json::parse compares each new key with every earlier one: 300k keys are ~4.5e10 string
  // compares (minutes; past this program's 60 s CTest timeout). Here it is one hash lookup per key.
  constexpr int kKeys = 300'000;
  std::string text = "{";
  for (int i = 0; i < kKeys; ++i) text += fmt::format("{}\"k{}\":{}", i ? "," : "", i, i);
  text += ",\"k7\":\"last\"}";
  auto r = parse_bounded_json(text);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), size_t(kKeys));
  EXPECT_EQ(r->begin().key(), "k0");
  EXPECT_EQ(std::next(r->begin(), 7).key(), "k7");
  EXPECT_EQ(std::next(r->begin(), 7).value(),
            "last");  // the duplicate kept its place and took the last value
  EXPECT_EQ(std::prev(r->end()).key(), fmt::format("k{}", kKeys - 1));
}

TEST(BoundedJson, ReportsSyntaxAndUtf8ErrorsAsNlohmannDoes) {
  for (const std::string& text : {
           std::string("{\"a\": tru}"),
           std::string("[1, 2"),
           std::string("{} x"),
           std::string(""),
           std::string("\"\xff\""),          // not UTF-8
           std::string("\"\xc0\x80\""),      // overlong NUL
           std::string("\"\xed\xa0\x80\""),  // an encoded surrogate
           std::string("\"\\ud800\""),       // a lone surrogate escape
           std::string("{\"a\":1,}"),
       }) {
    std::string expected;
    try {
      const Json unused = Json::parse(text);
    } catch (const Json::parse_error& e) {
      expected = e.what();
    }
    ASSERT_FALSE(expected.empty()) << text;
    EXPECT_EQ(error_of(text), expected);
  }
  EXPECT_NE(error_of("[1, 2 x]").find("line 1, column 7"), std::string::npos) << error_of("[1, 2 x]");
}

}  // namespace
}  // namespace rill::text
