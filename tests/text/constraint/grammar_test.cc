// Matcher semantics against hand-derived languages: sequences, choices, bounded and unbounded repeats,
// special tokens as single symbols, recursion (balanced brackets), RFC 3629 UTF-8, and build-time errors.
#include <gtest/gtest.h>

#include "text/constraint/grammar.h"

namespace rill::text::constraint {
namespace {

std::shared_ptr<const Grammar> built(GrammarBuilder& b, NodeId root) {
  auto g = b.build(root);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return *g;
}

bool accepts(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g);
  return m.advance_bytes(text) && m.is_complete();
}

TEST(Grammar, SequenceChoiceAndBoundedRepeat) {
  GrammarBuilder b;
  // ab (c|de){1,3} f?
  const NodeId root = b.seq({b.bytes("ab"), b.repeat(b.alt({b.bytes("c"), b.bytes("de")}), 1, 3), b.optional(b.bytes("f"))});
  const auto g = built(b, root);
  for (const char* ok : {"abc", "abde", "abcdec", "abcccf", "abdedede", "abdef"}) EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {"", "ab", "abcccc", "abd", "abff", "abcf c", "xabc"}) EXPECT_FALSE(accepts(g, bad)) << bad;
  Matcher m(g);
  EXPECT_FALSE(m.advance('b'));  // rejected symbols leave the state as it was
  EXPECT_TRUE(m.advance_bytes("abc"));
  EXPECT_TRUE(m.is_complete());
  EXPECT_FALSE(m.is_finished());  // c, de or f may follow
  EXPECT_FALSE(m.advance_bytes("dx"));
  EXPECT_TRUE(m.advance_bytes("dedef"));
  EXPECT_TRUE(m.is_finished());
}

TEST(Grammar, UnboundedRepeatStatesMeet) {
  GrammarBuilder b;
  const NodeId root = b.seq({b.bytes("\""), b.repeat(b.utf8_char("\"\\"), 2, -1), b.bytes("\"")});
  const auto g = built(b, root);
  EXPECT_FALSE(accepts(g, "\"a\""));
  EXPECT_TRUE(accepts(g, "\"ab\""));
  Matcher m(g);
  m.advance_bytes("\"abc");
  const auto s3 = m.state();
  m.advance_bytes("xyz");
  EXPECT_EQ(m.state(), s3);  // past min, the count is not part of the state: one mask serves every step
}

TEST(Grammar, SpecialTokensAreSingleSymbols) {
  GrammarBuilder b;
  const NodeId root = b.seq({b.special(7), b.bytes("call"), b.special(9)});
  const auto g = built(b, root);
  Matcher m(g);
  EXPECT_FALSE(m.can_advance(7));  // the byte 7 is not the special token 7
  EXPECT_TRUE(m.can_advance(special_symbol(7)));
  EXPECT_TRUE(m.advance(special_symbol(7)));
  EXPECT_TRUE(m.advance_bytes("call"));
  EXPECT_FALSE(m.can_advance(special_symbol(7)));
  EXPECT_TRUE(m.advance(special_symbol(9)));
  EXPECT_TRUE(m.is_finished());
  GrammarBuilder b2;
  const auto any = built(b2, b2.any_bytes());
  Matcher a(any);
  for (int c = 0; c < 256; ++c) EXPECT_TRUE(a.can_advance(c));
  EXPECT_FALSE(a.can_advance(special_symbol(0)));
}

TEST(Grammar, RecursiveRules) {
  // P := ( "(" P ")" )*   — balanced parentheses
  GrammarBuilder b;
  const NodeId p = b.declare_rule();
  b.define_rule(p, b.repeat(b.seq({b.bytes("("), p, b.bytes(")")}), 0, -1));
  const auto g = built(b, b.seq({b.bytes("<"), p, b.bytes(">")}));
  for (const char* ok : {"<>", "<()>", "<(())()>", "<((()))(()())>"}) EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {"<(>", "<)(>", "<(()>", "<())>"}) EXPECT_FALSE(accepts(g, bad)) << bad;
}

TEST(Grammar, Utf8CharIsRfc3629) {
  GrammarBuilder b;
  const auto g = built(b, b.repeat(b.utf8_char("\""), 0, -1));
  for (const char* ok : {"a", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xED\x9F\xBF", "\xF4\x8F\xBF\xBF"})
    EXPECT_TRUE(accepts(g, ok)) << ok;
  // overlong '/', lone continuation, surrogate U+D800, above U+10FFFF, a control char, the excluded quote,
  // a truncated sequence
  for (const char* bad : {"\xC0\xAF", "\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x01", "\"", "\xE2\x82"})
    EXPECT_FALSE(accepts(g, bad)) << testing::PrintToString(std::string(bad));
}

TEST(Grammar, BuildRejectsUndefinedRulesAndNullableLoops) {
  {
    GrammarBuilder b;
    const NodeId r = b.declare_rule();
    const auto g = b.build(b.seq({b.bytes("x"), r}));
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find("never defined"), std::string::npos) << g.status().to_string();
  }
  {
    GrammarBuilder b;
    const auto g = b.build(b.repeat(b.optional(b.bytes("x")), 0, -1));
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find("empty string"), std::string::npos) << g.status().to_string();
  }
  {
    GrammarBuilder b;  // bounded is fine: the count ends it
    EXPECT_TRUE(b.build(b.repeat(b.optional(b.bytes("x")), 0, 3)).ok());
  }
}

}  // namespace
}  // namespace rill::text::constraint
