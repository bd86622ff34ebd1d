// Stop strings over streamed text with the real Kimi vocabulary: every split point of a token stream gives
// the same text, nothing after a stop string is emitted, and text that only looked like a stop prefix is
// released.
#include <gtest/gtest.h>

#include "engine/stop_checker.h"
#include "shared_data.h"

namespace rill::engine {
namespace {

// The real Kimi vocabulary; a test calls RILL_REQUIRE_KIMI_TOKENIZER() first.
const text::Tokenizer& kimi() {
  static const auto t = text::Tokenizer::load(rill::testing::shared_path(rill::testing::kKimiTokenizerDir));
  return *t;
}

std::string run(const std::string& s, std::vector<std::string> stops, std::optional<std::string>* matched) {
  StopChecker c(&kimi(), std::move(stops));
  std::string out;
  for (int32_t id : kimi().encode(s, false)) {
    out += c.push(id, matched);
    if (*matched) return out;
  }
  return out + c.flush();
}

TEST(StopChecker, StopsBeforeTheStopString) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  std::optional<std::string> m;
  EXPECT_EQ(run("Hello world. STOP here and more", {"STOP"}, &m), "Hello world. ");
  EXPECT_EQ(m, "STOP");
  m.reset();
  EXPECT_EQ(run("北京是中国的首都。答案：是", {"答案"}, &m), "北京是中国的首都。");
  EXPECT_EQ(m, "答案");
}

TEST(StopChecker, ReleasesFalsePrefixesAndKeepsEverythingWithoutStops) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  std::optional<std::string> m;
  EXPECT_EQ(run("the STO is not a stop; 🚀 emoji ok", {"STOP"}, &m), "the STO is not a stop; 🚀 emoji ok");
  EXPECT_FALSE(m.has_value());
  EXPECT_EQ(run("plain text", {}, &m), "plain text");
}

TEST(StopChecker, EarliestStopWins) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  std::optional<std::string> m;
  EXPECT_EQ(run("a b c d", {"c", "b"}, &m), "a ");
  EXPECT_EQ(m, "b");
}

}  // namespace
}  // namespace rill::engine
