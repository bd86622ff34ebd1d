// Stop strings over streamed text with the real Kimi vocabulary: every split point of a token stream gives
// the same text, nothing after a stop string is emitted, and text that only looked like a stop prefix is
// released. vLLM's rules, each against a hand-derived expectation: min_tokens (a stop string counts only when
// it ends in the text of a token after the first min_tokens), include_stop_str_in_output, and
// skip_special_tokens (special tokens add no text, so no stop string matches inside their names).
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

std::string run_ids(const std::vector<int32_t>& ids, const SamplingParams& p,
                    std::optional<std::string>* matched) {
  StopChecker c(&kimi(), p);
  std::string out;
  for (int32_t id : ids) {
    out += c.push(id, matched);
    if (*matched) return out;
  }
  return out + c.flush();
}

std::string run(const std::string& s, std::vector<std::string> stops, std::optional<std::string>* matched) {
  return run_ids(kimi().encode(s, false), SamplingParams{.stop = std::move(stops)}, matched);
}

int32_t id_of(const char* special) {
  return *kimi().token_id(special);
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

TEST(StopChecker, IncludeStopStrInOutputKeepsTheMatch) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  std::optional<std::string> m;
  const SamplingParams p{.stop = {"STOP", "here"}, .include_stop_str_in_output = true};
  EXPECT_EQ(run_ids(kimi().encode("Hello world. STOP here and more", false), p, &m), "Hello world. STOP");
  EXPECT_EQ(m, "STOP");
}

// The case: "identif" generated within the first min_tokens tokens is text, not a stop (it used to be
// cut out of the output while generation went on: "identifform" came back as "form").
TEST(StopChecker, StopStringsBeforeMinTokensAreText) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const std::vector<int32_t> word = kimi().encode("identifform", false);
  const std::vector<int32_t> ids = kimi().encode("identifform and then identif more", false);
  ASSERT_TRUE(std::equal(word.begin(), word.end(), ids.begin())) << "the word is its own pre-token";
  std::optional<std::string> m;
  const SamplingParams p{.min_tokens = int32_t(word.size()), .stop = {"identif"}};
  EXPECT_EQ(run_ids(ids, p, &m), "identifform and then ");
  EXPECT_EQ(m, "identif");
}

// Against a brute-force reference for every min_tokens: after each token from the (min_tokens + 1)-th on, the
// stop-string occurrences that end in that token's text are looked for in the text so far; the first token
// with one cuts the text before the earliest of them (or nothing is cut).
TEST(StopChecker, MinTokensAgainstBruteForce) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  for (const std::string& text :
       std::vector<std::string>{"ab ab abab cab", "the fox, the fox; thethe end", "ééé é ééé"}) {
    const std::vector<int32_t> ids = kimi().encode(text, false);
    std::vector<std::string> prefix;  // prefix[k]: the text of the first k tokens
    for (size_t k = 0; k <= ids.size(); ++k) {
      prefix.push_back(*kimi().decode(std::span(ids).first(k)));
      ASSERT_TRUE(text.starts_with(prefix.back())) << "no token splits a character of " << text;
    }
    for (const std::vector<std::string>& stops :
         {std::vector<std::string>{"ab"}, {"the f", "e e"}, {"é é", "ab "}, {"x"}, {"b a", "ab"}}) {
      for (int32_t min_tokens = 0; min_tokens <= int32_t(ids.size()); ++min_tokens) {
        size_t cut = std::string::npos;
        for (size_t k = size_t(min_tokens) + 1; k <= ids.size() && cut == std::string::npos; ++k)
          for (const auto& s : stops)
            for (size_t at = prefix[k].find(s); at != std::string::npos; at = prefix[k].find(s, at + 1))
              if (at + s.size() > prefix[k - 1].size()) cut = std::min(cut, at);
        std::optional<std::string> m;
        EXPECT_EQ(run_ids(ids, SamplingParams{.min_tokens = min_tokens, .stop = stops}, &m),
                  text.substr(0, cut))
            << text << " | stops[0] " << stops[0] << " | min_tokens " << min_tokens;
        EXPECT_EQ(m.has_value(), cut != std::string::npos);
      }
    }
  }
}

// Special tokens add no text by default: reserved tokens and [BOS] vanish, the stop strings cannot match
// their names (but match across them); the added tokens that are not special (tool-call markers) stay.
// skip_special_tokens false keeps every name, as text that stop strings see.
TEST(StopChecker, SkipSpecialTokens) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const int32_t reserved = kimi().n_ranks() + 100;
  const std::vector<int32_t> a = kimi().encode("a", false), b = kimi().encode("b", false);
  std::vector<int32_t> ids = a;
  ids.insert(ids.end(), {reserved, id_of("[BOS]"), id_of("<|tool_call_begin|>")});
  ids.insert(ids.end(), b.begin(), b.end());
  const std::string reserved_name = fmt::format("<|reserved_token_{}|>", reserved);
  std::optional<std::string> m;
  EXPECT_EQ(run_ids(ids, SamplingParams{.stop = {"reserved", "BOS"}}, &m), "a<|tool_call_begin|>b");
  EXPECT_FALSE(m.has_value());
  EXPECT_EQ(run_ids(ids, SamplingParams{.skip_special_tokens = false}, &m),
            "a" + reserved_name + "[BOS]<|tool_call_begin|>b");
  EXPECT_EQ(run_ids(ids, SamplingParams{.stop = {"reserved"}, .skip_special_tokens = false}, &m), "a<|");
  EXPECT_EQ(m, "reserved");
  m.reset();
  std::vector<int32_t> across = a;
  across.push_back(id_of("[BOS]"));
  across.insert(across.end(), b.begin(), b.end());
  EXPECT_EQ(run_ids(across, SamplingParams{.stop = {"ab"}}, &m), "");
  EXPECT_EQ(m, "ab");
}

}  // namespace
}  // namespace rill::engine
