// TokenMasker against the obvious reference: for every id of the real Kimi vocabulary, copy the matcher and
// feed that token alone. The walk must give the same set in every state of a few grammars (bytes that
// split across tokens, special tokens, free text), split over the thread pool (8 threads: CMakeLists) and
// serial. Then GrammarConstraint's end-token rules.
#include <gtest/gtest.h>

#include <filesystem>

#include "shared_data.h"
#include "text/constraint/mask_reference.h"
#include "text/constraint/grammar_constraint.h"
#include "text/constraint/token_mask.h"

namespace rill::text::constraint {
namespace {

// The real Kimi vocabulary; a test calls RILL_REQUIRE_KIMI_TOKENIZER() first.
const Tokenizer& kimi() {
  static const Tokenizer t =
      std::move(Tokenizer::load(rill::testing::shared_path(rill::testing::kKimiTokenizerDir))).value();
  return t;
}

int count(std::span<const uint32_t> mask) {
  int n = 0;
  for (uint32_t w : mask) n += __builtin_popcount(w);
  return n;
}

TEST(TokenMask, EqualsFeedingEveryTokenAlone) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const Tokenizer& tok = kimi();
  const TokenMasker tm(tok);
  ASSERT_EQ(tm.vocab_size(), 163840);
  const int32_t open = *tok.token_id("<|im_user|>"), end = *tok.token_id("<|im_end|>");
  GrammarBuilder b;
  // <|im_user|> call tool=" (get_weather|get_time) " {"city": "<chars>"} <|im_end|>
  const NodeId str = b.seq({b.bytes("\""), b.repeat(b.utf8_char("\"\\"), 0, -1), b.bytes("\"")});
  const NodeId root = b.seq({b.special(open), b.bytes("call tool=\""), b.alt({b.bytes("get_weather"), b.bytes("get_time")}),
                             b.bytes("\" "), b.bytes("{\"city\":"), b.optional(b.bytes(" ")), str, b.bytes("}"),
                             b.special(end)});
  auto g = b.build(root);
  ASSERT_TRUE(g.ok());
  Matcher m(*g);
  // Walk the grammar along one sentence, comparing in each state (including mid-token positions).
  const std::string text = "call tool=\"get_time\" {\"city\": \"Zürich 東京\"}";
  std::vector<uint32_t> mask(tm.mask_words());
  std::vector<uint32_t> serial(tm.mask_words());
  auto check = [&](const char* where) {
    tm.allowed(m, mask);  // split over the thread pool where the walk is large (inside the string)
    tm.allowed(m, serial, /*parallel=*/false);
    const std::vector<uint32_t> expected = mask_by_feeding_each_token(tm, m);
    EXPECT_EQ(mask, expected) << where;
    EXPECT_EQ(serial, expected) << where;
    EXPECT_GT(count(mask), 0) << where;
  };
  check("start");
  EXPECT_EQ(count(mask), 1);  // only <|im_user|>
  ASSERT_TRUE(m.advance(special_symbol(open)));
  for (size_t i = 0; i < text.size(); ++i) {
    check(text.substr(0, i).c_str());
    ASSERT_TRUE(m.advance(uint8_t(text[i]))) << i;
  }
  check("before the end token");
  EXPECT_EQ(count(mask), 1);
  EXPECT_TRUE(test_bit(mask, end));
}

TEST(TokenMask, FreeTextAllowsEveryRankToken) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const TokenMasker tm(kimi());
  GrammarBuilder b;
  auto g = b.build(b.any_bytes());
  ASSERT_TRUE(g.ok());
  std::vector<uint32_t> mask(tm.mask_words());
  tm.allowed(Matcher(*g), mask);
  for (int32_t id = 0; id < tm.vocab_size(); ++id) EXPECT_EQ(test_bit(mask, id), !kimi().is_special(id)) << id;
}

TEST(GrammarConstraint, EndTokensOnlyWhenComplete) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const Tokenizer& tok = kimi();
  auto tm = std::make_shared<const TokenMasker>(tok);
  GrammarBuilder b;
  auto g = b.build(b.repeat(b.alt({b.bytes("yes"), b.bytes("no")}), 1, 2));
  ASSERT_TRUE(g.ok());
  const int32_t eos = *tok.token_id("<|im_end|>");
  GrammarConstraint c(*g, tm, {eos});
  std::vector<uint32_t> mask(tm->mask_words());
  c.allowed_tokens(mask);
  EXPECT_FALSE(test_bit(mask, eos));
  const auto yes = tok.encode("yes", false);
  ASSERT_EQ(yes.size(), 1u);
  EXPECT_TRUE(test_bit(mask, yes[0]));
  c.accept(yes[0]);
  c.allowed_tokens(mask);
  EXPECT_TRUE(test_bit(mask, eos));  // complete: may end
  EXPECT_TRUE(test_bit(mask, yes[0]));  // or repeat once more
  c.accept(yes[0]);
  c.allowed_tokens(mask);
  EXPECT_EQ(count(mask), 1);  // finished: only the end
  EXPECT_TRUE(test_bit(mask, eos));
  c.accept(eos);
  EXPECT_FALSE(c.broken());
}

}  // namespace
}  // namespace rill::text::constraint
