// Counted states (counted_mask.h) against the full walk: along random walks through random grammars with
// bounded repeats (nested, shared, recursive, below and above min, repeats of nullable children) and JSON
// schemas with maxLength / minLength / {m,n} patterns / maxItems, over random vocabularies, every mask built
// from a counted walk must equal TokenMasker::allowed on the state itself, which token_mask_test holds
// against feeding each token alone (and so is it here, on the small vocabularies). Then the same on the real
// Kimi vocabulary. Seeds: the commit's (RILL_TEST_SEED=N replays).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>

#include "shared_data.h"
#include "text/constraint/mask_reference.h"
#include "test_seed.h"
#include "text/constraint/counted_mask.h"
#include "text/constraint/grammar_constraint.h"
#include "text/constraint/json_schema.h"
#include "text/tokenizer/bpe_trainer.h"

namespace rill::text::constraint {
namespace {

using Json = nlohmann::ordered_json;

// A tokenizer whose ranks are the 256 bytes and `n` random strings of `alphabet`'s pieces (whole UTF-8
// characters or single bytes, so tokens may split a character), written to a temporary directory.
Tokenizer random_tokenizer(std::mt19937& rng, const std::vector<std::string>& alphabet, int n) {
  std::vector<std::string> ranks;
  for (int c = 0; c < 256; ++c) ranks.push_back(std::string(1, char(c)));
  std::set<std::string> seen(ranks.begin(), ranks.end());
  while (int(ranks.size()) < 256 + n) {
    std::string t;
    const int pieces = 1 + int(rng() % 6);
    for (int i = 0; i < pieces; ++i) t += alphabet[rng() % alphabet.size()];
    if (rng() % 8 == 0 && t.size() > 1) t.pop_back();  // may end inside a multi-byte character
    if (seen.insert(t).second) ranks.push_back(t);
  }
  const auto dir = std::filesystem::temp_directory_path() /
                   ("rill_counted_mask_" + std::to_string(::getpid()) + "_" + std::to_string(rng()));
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(write_tiktoken_model(dir / "tiktoken.model", ranks).ok());
  EXPECT_TRUE(write_tokenizer_config(dir / "tokenizer_config.json", int32_t(ranks.size())).ok());
  auto t = Tokenizer::load(dir);
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t).value();
}

constexpr size_t kMaxStacks = 24;

struct Tally {
  int states = 0, counted = 0;
};

// Walks `steps` random tokens from the grammar's start; in each state compares the counted mask (where the
// state has a counted view whose walk is exact) with the full walk, and the full walk with feeding each
// token (when `brute`). Also drives a GrammarConstraint alongside, whose masks (counted walks cached per
// shape across the counts) must be the same.
void walk_and_compare(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const TokenMasker>& tm,
                      std::mt19937& rng, int steps, bool brute, Tally& tally) {
  Matcher m(g);
  GrammarConstraint c(g, tm, {});
  std::vector<uint32_t> full(tm->mask_words()), fast(tm->mask_words()), via_constraint(tm->mask_words());
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    // Random ambiguous grammars can hold thousands of parses (each walk then takes long); enough of them
    // stay small.
    if (m.state().size() > kMaxStacks) return;
    tm->allowed(m, full);
    if (brute) {
      ASSERT_EQ(full, mask_by_feeding_each_token(*tm, m));
    }
    ++tally.states;
    if (auto view = counted_view(m)) {
      if (auto walked = CountedMask::walk(*tm, view->relaxed)) {
        ++tally.counted;
        walked->fill(view->budget, fast);
        ASSERT_EQ(fast, full) << "budget " << view->budget;
        // Every other budget of the shape too: the state at each other count (a full walk stands in).
        for (int32_t b = 0; b < view->budget; ++b) {
          walked->fill(b, fast);
          for (int32_t t = 0; t < tm->vocab_size(); ++t) {
            ASSERT_TRUE(!test_bit(fast, t) || test_bit(full, t)) << "budget " << b << " is no subset";
          }
        }
      }
    }
    c.allowed_tokens(via_constraint);
    std::vector<uint32_t> expected = full;
    if (std::all_of(expected.begin(), expected.end(), [](uint32_t w) { return w == 0; }))
      std::fill(expected.begin(), expected.end(), ~0u);  // nothing continues: unconstrained (no end tokens)
    ASSERT_EQ(via_constraint, expected);
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < tm->vocab_size(); ++t)
      if (test_bit(full, t)) allowed.push_back(t);
    if (allowed.empty()) return;
    // Single bytes more often than their share, so strings run long enough to reach their bounds.
    int32_t pick = allowed[rng() % allowed.size()];
    if (rng() % 2 == 0)
      for (int tries = 0; tries < 4; ++tries) {
        const int32_t t = allowed[rng() % allowed.size()];
        if (t < 256) { pick = t; break; }
      }
    ASSERT_TRUE(tm->advance(m, pick));
    c.accept(pick);
    ASSERT_FALSE(c.broken());
  }
}

// A random grammar over "ab" and "é" whose repeats are mostly bounded.
class RandomGrammar {
 public:
  RandomGrammar(std::mt19937& rng) : rng_(rng) {}
  Result<std::shared_ptr<const Grammar>> make() {
    rule_ = b_.declare_rule();
    const NodeId body = node(3);
    b_.define_rule(rule_, body);
    return b_.build(b_.seq({node(2), rule_, node(2)}));
  }

 private:
  int pick(int n) { return int(rng_() % uint32_t(n)); }
  NodeId node(int depth) {
    const int kind = depth <= 0 ? pick(4) : pick(11);
    switch (kind) {
      case 0: return b_.bytes(std::string(1 + size_t(pick(3)), "ab"[pick(2)]));
      case 1: return b_.byte_range('a', uint8_t('a' + pick(3)));
      case 2: return b_.utf8_char("b");
      case 3: return b_.bytes("\xC3\xA9");  // é
      case 4: return b_.seq({node(depth - 1), node(depth - 1)});
      case 5: return b_.alt({node(depth - 1), node(depth - 1), node(depth - 1)});
      case 6:
      case 7:
      case 8: {  // bounded: min 0-3, up to 6 more
        const int min = pick(4);
        return b_.repeat(node(depth - 1), min, min + pick(7));
      }
      case 9: return b_.repeat(shared(depth - 1), pick(2), 2 + pick(4));  // the same node at several depths
      default: return depth >= 3 ? b_.seq({b_.bytes("("), b_.repeat(rule_, 0, 1 + pick(4)), b_.bytes(")")})
                                 : b_.optional(node(depth - 1));  // recursion: one repeat nested in itself
    }
  }
  NodeId shared(int depth) {
    if (shared_ < 0) shared_ = b_.repeat(node(depth), 1, 3 + pick(3));
    return shared_;
  }
  std::mt19937& rng_;
  GrammarBuilder b_;
  NodeId rule_ = -1, shared_ = -1;
};

TEST(CountedMask, RandomGrammarsEqualTheFullWalk) {
  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  Tally tally;
  int grammars = 0;
  for (int v = 0; v < 4; ++v) {
    // The masker keeps views of the tokenizer's bytes.
    const Tokenizer tok = random_tokenizer(rng, {"a", "b", "c", "(", ")", "\xC3\xA9", "\xC3", "\xE6\x9D\xB1"}, 300);
    auto tm = std::make_shared<const TokenMasker>(tok);
    for (int i = 0; i < 30; ++i) {
      auto g = RandomGrammar(rng).make();
      if (!g.ok()) continue;  // an unbounded repeat of a nullable child, or too wide a start
      ++grammars;
      SCOPED_TRACE("vocabulary " + std::to_string(v) + ", grammar " + std::to_string(i));
      walk_and_compare(*g, tm, rng, 24, /*brute=*/v == 0, tally);
      if (HasFatalFailure()) return;
    }
  }
  std::printf("%d grammars, %d states, %d filtered from a counted walk\n", grammars, tally.states, tally.counted);
  EXPECT_GT(grammars, 60);
  EXPECT_GT(tally.counted, tally.states / 10);
}

// A random schema with counted states: bounded strings (some with minLength, some with {m,n} patterns),
// bounded arrays of them, integers, in an object.
Json random_schema(std::mt19937& rng) {
  auto pick = [&](int n) { return int(rng() % uint32_t(n)); };
  auto bounded_string = [&] {
    Json s = {{"type", "string"}};
    switch (pick(4)) {
      case 0: s["maxLength"] = 1 + pick(30); break;
      case 1: s["minLength"] = pick(4), s["maxLength"] = 4 + pick(20); break;
      case 2: s["pattern"] = "^[a-c]{" + std::to_string(pick(3)) + "," + std::to_string(3 + pick(12)) + "}(x|yz){0," +
                             std::to_string(1 + pick(4)) + "}$";
        break;
      default: s["pattern"] = "^(ab|é){1," + std::to_string(2 + pick(10)) + "}$"; break;
    }
    return s;
  };
  Json props = Json::object(), required = Json::array();
  const int n = 1 + pick(3);
  for (int i = 0; i < n; ++i) {
    const std::string name(1, char('p' + i));
    switch (pick(3)) {
      case 0: props[name] = bounded_string(); break;
      case 1: props[name] = {{"type", "array"}, {"items", bounded_string()}, {"maxItems", 1 + pick(4)}}; break;
      default: props[name] = {{"type", "integer"}}; break;
    }
    required.push_back(name);
  }
  return {{"type", "object"}, {"properties", props}, {"required", required}};
}

TEST(CountedMask, RandomSchemasEqualTheFullWalk) {
  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed ^ 0x5eed);
  Tally tally;
  for (int v = 0; v < 3; ++v) {
    const Tokenizer tok = random_tokenizer(
        rng, {"{", "}", "[", "]", "\"", ",", ":", " ", "p", "q", "r", "a", "b", "c", "x", "y", "z", "1", "2", "0",
              "\\", "\\\"", "\\u00e9", "\xC3\xA9", "\xC3", "\xA9", "\xF0\x9F\x98\x80"},
        600);
    auto tm = std::make_shared<const TokenMasker>(tok);
    for (int i = 0; i < 25; ++i) {
      const Json schema = random_schema(rng);
      SCOPED_TRACE(schema.dump());
      auto g = json_grammar(&schema);
      ASSERT_TRUE(g.ok()) << g.status().to_string();
      walk_and_compare(*g, tm, rng, 40, /*brute=*/false, tally);
      if (HasFatalFailure()) return;
    }
  }
  std::printf("%d states, %d filtered from a counted walk\n", tally.states, tally.counted);
  EXPECT_GT(tally.counted, tally.states / 4);
}

// The real vocabulary: a bounded string with a low and a high budget, and a {m,n} pattern, along random
// generations (full walks of 163840 tokens: a few dozen states).
TEST(CountedMask, KimiVocabularyEqualsTheFullWalk) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  static const Tokenizer tok =
      std::move(Tokenizer::load(rill::testing::shared_path(rill::testing::kKimiTokenizerDir))).value();
  auto tm = std::make_shared<const TokenMasker>(tok);
  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  Tally tally;
  for (const char* s : {R"({"type":"object","properties":{"note":{"type":"string","maxLength":12}},"required":["note"]})",
                        R"({"type":"object","properties":{"n":{"type":"string","minLength":3,"maxLength":300}},"required":["n"]})",
                        R"({"type":"object","properties":{"c":{"type":"string","pattern":"^[a-z]{2,20}-(x|yz){0,3}$"}},"required":["c"]})"}) {
    SCOPED_TRACE(s);
    const Json schema = Json::parse(s);
    auto g = json_grammar(&schema);
    ASSERT_TRUE(g.ok());
    walk_and_compare(*g, tm, rng, 8, /*brute=*/false, tally);
    if (HasFatalFailure()) return;
  }
  std::printf("%d states, %d filtered from a counted walk\n", tally.states, tally.counted);
  EXPECT_GT(tally.counted, 0);
}

}  // namespace
}  // namespace rill::text::constraint
