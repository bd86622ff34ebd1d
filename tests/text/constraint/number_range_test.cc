// Number ranges (minimum / maximum / exclusive*) as digit-range grammars, checked against comparisons that
// share no code with the construction: machine integers (__int128 for 30-digit bounds) for integer ranges,
// and scaled integers (values in thousandths) or a padded-string comparison for decimal ranges. Every text
// of a domain is fed: accepted exactly when its value is in range and it is spelled as the grammar promises
// (number_range.h). Random ranges and walks take RILL_TEST_SEED.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>

#include "test_seed.h"
#include "text/constraint/number_range.h"

namespace rill::text::constraint {
namespace {

using Int = __int128;

std::string to_text(Int v) {
  if (v == 0) return "0";
  const bool neg = v < 0;
  std::string s;
  for (Int m = neg ? -v : v; m > 0; m /= 10) s.insert(s.begin(), char('0' + int(m % 10)));
  return neg ? "-" + s : s;
}

std::shared_ptr<const Grammar> build(GrammarBuilder& b, NodeId root) {
  auto g = b.build(root);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return *g;
}

bool accepts(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g);
  return m.advance_bytes(text) && m.is_complete();
}

Decimal dec(std::string_view text) {
  auto d = Decimal::parse(text);
  EXPECT_TRUE(d.has_value()) << text;
  return d.value_or(Decimal{});
}

uint32_t seed_for(const char* what) {
  const uint32_t seed = rill::testing::test_seed();
  std::printf("[ number_range ] %s: seed %u (RILL_TEST_SEED=%u replays it)\n", what, seed, seed);
  return seed;
}

TEST(Decimal, ParsesJsonNumberText) {
  const std::pair<const char*, const char*> cases[] = {{"0", "0"},
                                                       {"-0", "0"},
                                                       {"-0.0", "0"},
                                                       {"12", "12"},
                                                       {"-12.50", "-12.5"},
                                                       {"1e3", "1000"},
                                                       {"1E+3", "1000"},
                                                       {"2.5e-3", "0.0025"},
                                                       {"1.5e1", "15"},
                                                       {"0.000", "0"},
                                                       {"1e+30", "1000000000000000000000000000000"},
                                                       {"123.456e-5", "0.00123456"},
                                                       {"007", "7"}};
  for (const auto& [in, out] : cases) EXPECT_EQ(dec(in).text(), out) << in;
  for (const char* bad : {"", "-", "1.", ".5", "1e", "+1", "1x", "--1", "0x10", "1e-"})
    EXPECT_FALSE(Decimal::parse(bad).has_value()) << bad;
  EXPECT_EQ(dec("2.5").floor().text(), "2");
  EXPECT_EQ(dec("-2.5").floor().text(), "-3");
  EXPECT_EQ(dec("2.5").ceil().text(), "3");
  EXPECT_EQ(dec("-2.5").ceil().text(), "-2");
  EXPECT_EQ(dec("-0.5").ceil().text(), "0");
  EXPECT_EQ(dec("-1").plus_one().text(), "0");
  EXPECT_EQ(dec("0").minus_one().text(), "-1");
  EXPECT_EQ(dec("999").plus_one().text(), "1000");
  EXPECT_EQ(dec("-1000").plus_one().text(), "-999");
  EXPECT_LT(compare(dec("-10"), dec("-9.5")), 0);
  EXPECT_LT(compare(dec("0.05"), dec("0.5")), 0);
  EXPECT_EQ(compare(dec("1.50"), dec("1.5")), 0);
  EXPECT_GT(compare(dec("10"), dec("9.99")), 0);
}

// Every integer text in [-2500, 2500], and spellings the grammar must refuse, against random ranges.
TEST(IntegerRange, MatchesIntegerComparisonOnEveryText) {
  std::mt19937 rng(seed_for("integer ranges"));
  std::uniform_int_distribution<int> end(-2200, 2200);
  for (int trial = 0; trial < 60; ++trial) {
    std::optional<int> lo = end(rng), hi = end(rng);
    if (trial % 5 == 1) lo.reset();
    if (trial % 5 == 2) hi.reset();
    if (trial % 7 == 3) hi = lo.value_or(5);  // one value
    SCOPED_TRACE("[" + (lo ? std::to_string(*lo) : "-inf") + ", " + (hi ? std::to_string(*hi) : "inf") + "]");
    GrammarBuilder b;
    auto d = [](std::optional<int> v) {
      return v ? std::optional<Decimal>(dec(std::to_string(*v))) : std::nullopt;
    };
    const auto g = build(b, integer_range_node(b, d(lo), d(hi)));
    for (int v = -2500; v <= 2500; ++v) {
      const bool in = (!lo || v >= *lo) && (!hi || v <= *hi);
      ASSERT_EQ(accepts(g, std::to_string(v)), in) << v;
    }
    for (const char* bad : {"-0", "01", "-01", "+1", "1.0", "1e2", "", "-", "00"})
      EXPECT_FALSE(accepts(g, bad)) << bad;
  }
}

// Bounds past 64 bits: texts near them, compared as __int128.
TEST(IntegerRange, BigBounds) {
  const Int lo = -Int(1) * Int(1000000000000000000) * Int(123456789012);  // -1.23e29
  const Int hi = Int(632008100105505) * Int(100000000000000);             // 6.32008100105505e28
  GrammarBuilder b;
  const auto g = build(b, integer_range_node(b, dec(to_text(lo)), dec(to_text(hi))));
  std::mt19937 rng(seed_for("big integer bounds"));
  for (Int center : {lo, hi, Int(0), hi / 10, lo / 7}) {
    for (int k = -300; k <= 300; ++k) {
      const Int v = center + k + Int(rng() % 3) - 1;
      ASSERT_EQ(accepts(g, to_text(v)), v >= lo && v <= hi) << to_text(v);
    }
  }
  EXPECT_FALSE(accepts(g, "9640010098050097597000000000000"));
  EXPECT_TRUE(accepts(g, "9640010098050097597"));
}

// A decimal range's accepted spellings of v/1000, for v in [-60000, 60000]: the shortest, and with trailing
// zeros added (1.5, 1.50, 1.500); integers also as "3.0". In range (scaled-integer comparison) <=> accepted.
TEST(NumberRange, MatchesScaledComparisonOnEveryText) {
  std::mt19937 rng(seed_for("number ranges"));
  std::uniform_int_distribution<int> end(-50000, 50000);
  auto spell = [](int v, int extra_zeros) {
    const bool neg = v < 0;
    const int m = neg ? -v : v;
    std::string frac = fmt::format("{:03d}", m % 1000);
    while (!frac.empty() && frac.back() == '0') frac.pop_back();
    std::string s = (neg ? "-" : "") + std::to_string(m / 1000);
    if (!frac.empty() || extra_zeros > 0) s += "." + frac + std::string(size_t(extra_zeros), '0');
    return s;
  };
  for (int trial = 0; trial < 40; ++trial) {
    // Ends with 0-3 fraction digits (rounded to tens, hundreds or thousandths).
    const int unit[] = {1, 10, 100, 1000};
    auto pick = [&] { return end(rng) / unit[rng() % 4] * unit[rng() % 4]; };
    int lo = pick(), hi = pick();
    if (lo > hi) std::swap(lo, hi);
    const bool lo_excl = rng() % 2, hi_excl = rng() % 2;
    const bool has_lo = trial % 6 != 1, has_hi = trial % 6 != 2;
    NumberRange range;
    if (has_lo) range.lo = Bound{dec(spell(lo, 0)), lo_excl};
    if (has_hi) range.hi = Bound{dec(spell(hi, 0)), hi_excl};
    SCOPED_TRACE(fmt::format("{}{}, {}{}", lo_excl ? "(" : "[", has_lo ? spell(lo, 0) : "-inf",
                             has_hi ? spell(hi, 0) : "inf", hi_excl ? ")" : "]"));
    GrammarBuilder b;
    const auto g = build(b, number_range_node(b, range));
    for (int v = -60000; v <= 60000; v += 1 + int(rng() % 7)) {
      const bool in = (!has_lo || (lo_excl ? v > lo : v >= lo)) && (!has_hi || (hi_excl ? v < hi : v <= hi));
      for (int zeros : {0, 1, 2}) {
        const std::string text = spell(v, zeros);
        ASSERT_EQ(accepts(g, text), in) << text;
        if (v != 0) continue;
        EXPECT_FALSE(accepts(g, "-" + text)) << "-" + text;  // zero is spelled without a sign
      }
    }
    for (const char* bad : {"1e3", "01", "1.", ".5", "+1", "-", ""}) EXPECT_FALSE(accepts(g, bad)) << bad;
  }
}

// a <=> b for decimal texts, by padding both to the same digit positions (no shared code with Decimal).
int compare_texts(std::string a, std::string b) {
  const bool na = a[0] == '-', nb = b[0] == '-';
  if (na) a.erase(0, 1);
  if (nb) b.erase(0, 1);
  auto split = [](const std::string& s) {
    const size_t dot = s.find('.');
    return std::pair{s.substr(0, dot), dot == std::string::npos ? "" : s.substr(dot + 1)};
  };
  auto [ai, af] = split(a);
  auto [bi, bf] = split(b);
  const size_t wi = std::max(ai.size(), bi.size()), wf = std::max(af.size(), bf.size());
  ai.insert(0, wi - ai.size(), '0'), bi.insert(0, wi - bi.size(), '0');
  af.append(wf - af.size(), '0'), bf.append(wf - bf.size(), '0');
  const std::string ma = ai + af, mb = bi + bf;
  const bool za = ma.find_first_not_of('0') == std::string::npos,
             zb = mb.find_first_not_of('0') == std::string::npos;
  const int sa = za ? 0 : na ? -1 : 1, sb = zb ? 0 : nb ? -1 : 1;
  if (sa != sb) return sa < sb ? -1 : 1;
  const int c = ma.compare(mb);
  return sa < 0 ? -c : c;
}

// Walks through range grammars (byte by byte, drawn among the accepted next bytes): long fractions and
// integer parts far from the bounds, each checked with compare_texts.
TEST(NumberRange, RandomWalksStayInRange) {
  std::mt19937 rng(seed_for("number range walks"));
  const std::pair<const char*, const char*> ends[] = {
      {"-90", "90"},         {"0", "1"},
      {"0.001", "0.0011"},   {"-1.25", "-1.2"},
      {"99.999", "100.001"}, {"-12345678901234567890.5", "3.14159"},
      {"0", nullptr},        {nullptr, "-7.5"}};
  for (const auto& [lo_text, hi_text] : ends) {
    for (int excl = 0; excl < 4; ++excl) {
      NumberRange range;
      if (lo_text) range.lo = Bound{dec(lo_text), bool(excl & 1)};
      if (hi_text) range.hi = Bound{dec(hi_text), bool(excl & 2)};
      SCOPED_TRACE(fmt::format("{} {} {}", lo_text ? lo_text : "-inf", hi_text ? hi_text : "inf", excl));
      GrammarBuilder b;
      const auto g = build(b, number_range_node(b, range));
      for (int walk = 0; walk < 200; ++walk) {
        Matcher m(g);
        std::string text;
        while (text.size() < 60) {
          std::vector<int> next;
          for (int c = 0; c < 256; ++c)
            if (m.can_advance(c)) next.push_back(c);
          if (next.empty() || (m.is_complete() && rng() % 5 == 0)) break;
          const int c = next[rng() % next.size()];
          ASSERT_TRUE(m.advance(c));
          text.push_back(char(c));
        }
        if (!m.is_complete()) continue;  // cut off by the length cap
        if (lo_text) {
          EXPECT_TRUE(excl & 1 ? compare_texts(text, lo_text) > 0 : compare_texts(text, lo_text) >= 0)
              << text;
        }
        if (hi_text) {
          EXPECT_TRUE(excl & 2 ? compare_texts(text, hi_text) < 0 : compare_texts(text, hi_text) <= 0)
              << text;
        }
      }
    }
  }
}

TEST(NumberRange, EmptyRanges) {
  EXPECT_TRUE((NumberRange{Bound{dec("1"), true}, Bound{dec("1"), false}}.empty()));
  EXPECT_TRUE((NumberRange{Bound{dec("2"), false}, Bound{dec("1.5"), false}}.empty()));
  EXPECT_FALSE((NumberRange{Bound{dec("1"), false}, Bound{dec("1"), false}}.empty()));
  GrammarBuilder b;
  const auto g =
      build(b, number_range_node(b, NumberRange{Bound{dec("1.5"), false}, Bound{dec("1.5"), false}}));
  for (const char* ok : {"1.5", "1.50", "1.5000"}) EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* no : {"1.51", "1.49", "1", "2"}) EXPECT_FALSE(accepts(g, no)) << no;
}

}  // namespace
}  // namespace rill::text::constraint
