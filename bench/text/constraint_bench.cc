// Grammar-constrained decoding on the host (src/text/constraint): what one vocabulary walk costs on Kimi's
// 163840 tokens in the three kinds of state a JSON grammar has, what a whole constrained generation costs
// per token with the mask cache, and what one token inside a string costs once its walk is cached (an
// unbounded string: the cached mask; a `maxLength` string: the counted walk filtered by the count left). docs/PERF.md "Constrained decoding" keeps the numbers; the budget they are
// held against is the GPU decode step the walk overlaps (the masks are computed while it runs).
//
//   constraint_bench [--benchmark_filter=...]   (vocabulary: the shared test data's tokenizers/kimi)
#include <benchmark/benchmark.h>

#include <cstdio>
#include <memory>
#include <random>

#include "shared_data.h"
#include "text/constraint/counted_mask.h"
#include "text/constraint/grammar_constraint.h"
#include "text/constraint/json_schema.h"

namespace {

using namespace rill::text;
using namespace rill::text::constraint;
using Json = nlohmann::ordered_json;

const Tokenizer& kimi() {
  static const auto* t = [] {
    auto r = Tokenizer::load(rill::testing::shared_path(rill::testing::kKimiTokenizerDir));
    if (!r.ok()) {
      const std::string missing = rill::testing::missing_shared_files(
          {rill::testing::kKimiTiktokenModel, rill::testing::kKimiTokenizerConfig});
      std::fprintf(stderr, "%s\n%s\n", r.status().to_string().c_str(), missing.c_str());
      std::exit(1);
    }
    return new Tokenizer(std::move(r).value());
  }();
  return *t;
}

const std::shared_ptr<const TokenMasker>& masker() {
  static const auto m = std::make_shared<const TokenMasker>(kimi());
  return m;
}

std::shared_ptr<const Grammar> schema_grammar(const char* schema) {
  const Json s = Json::parse(schema);
  auto g = json_grammar(&s);
  if (!g.ok()) std::exit(1);
  return *g;
}

// One uncached walk from the state after `prefix`.
void walk_after(benchmark::State& state, const char* schema, const char* prefix) {
  Matcher m(schema_grammar(schema));
  if (!m.advance_bytes(prefix)) std::exit(1);
  std::vector<uint32_t> mask(masker()->mask_words());
  for (auto _ : state) {
    masker()->allowed(m, mask);
    benchmark::DoNotOptimize(mask.data());
  }
  int n = 0;
  for (uint32_t w : mask) n += __builtin_popcount(w);
  state.counters["allowed_tokens"] = n;
}

constexpr const char* kSchema =
    R"({"type":"object","properties":{"city":{"type":"string"},"note":{"type":"string","maxLength":40},
        "unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer"}},"required":["city","note","unit","days"]})";

void BM_WalkInsideString(benchmark::State& s) { walk_after(s, kSchema, R"({"city":"Os)"); }
void BM_WalkInsideBoundedString(benchmark::State& s) { walk_after(s, kSchema, R"({"city":"Oslo","note":"a)"); }
void BM_WalkInsideEnumLiteral(benchmark::State& s) { walk_after(s, kSchema, R"({"city":"Oslo","note":"a","unit":"cel)"); }
void BM_WalkAfterComma(benchmark::State& s) { walk_after(s, kSchema, R"({"city":"Oslo",)"); }

// The counting walk a bounded string's first token pays (counted_mask.h), from the same state as
// BM_WalkInsideBoundedString.
void BM_CountingWalkInsideBoundedString(benchmark::State& state) {
  Matcher m(schema_grammar(kSchema));
  if (!m.advance_bytes(R"({"city":"Oslo","note":"a)")) std::exit(1);
  const auto view = counted_view(m);
  if (!view) std::exit(1);
  for (auto _ : state) {
    auto walked = CountedMask::walk(*masker(), view->relaxed);
    benchmark::DoNotOptimize(walked);
  }
}

// One token inside a string after the string's first token: allowed_tokens, then accept the one-byte token
// "a". Unbounded: the state never changes (a cache hit); maxLength: the count moves (the counted filter).
void token_inside(benchmark::State& state, const char* schema) {
  const int32_t a = kimi().encode("a", false).at(0);
  GrammarConstraint c(schema_grammar(schema), masker(), {*kimi().token_id("<|im_end|>")});
  std::vector<uint32_t> mask(masker()->mask_words());
  for (const int32_t t : kimi().encode(R"({"note":"a)", false)) c.accept(t);
  c.allowed_tokens(mask);  // the walk, outside the timing
  c.accept(a);
  for (auto _ : state) {
    c.allowed_tokens(mask);
    c.accept(a);
    benchmark::DoNotOptimize(mask.data());
  }
  if (c.broken()) std::exit(1);
}
// The counted filter in a string's last characters (budget under CountedMask's kFew: a pass over a byte per
// token instead of a copy).
void BM_FillNearMaxLength(benchmark::State& state) {
  Matcher m(schema_grammar(kSchema));
  if (!m.advance_bytes(R"({"city":"Oslo","note":"abcdefghijklmnopqrstuvwxyz01234)")) std::exit(1);
  const auto view = counted_view(m);
  const auto walked = view ? CountedMask::walk(*masker(), view->relaxed) : std::nullopt;
  if (!walked || view->budget >= 15) std::exit(1);
  std::vector<uint32_t> mask(masker()->mask_words());
  for (auto _ : state) {
    walked->fill(view->budget, mask);
    benchmark::DoNotOptimize(mask.data());
  }
}

void BM_TokenInsideString(benchmark::State& s) {
  token_inside(s, R"({"type":"object","properties":{"note":{"type":"string"}},"required":["note"]})");
}
void BM_TokenInsideBoundedString(benchmark::State& s) {
  token_inside(s, R"({"type":"object","properties":{"note":{"type":"string","maxLength":100000}},"required":["note"]})");
}

// A seeded random generation through GrammarConstraint (mask cache on), reported per token.
void generate(benchmark::State& state, const char* schema) {
  const auto g = schema_grammar(schema);
  int64_t tokens = 0;
  for (auto _ : state) {
    GrammarConstraint c(g, masker(), {*kimi().token_id("<|im_end|>")});
    std::vector<uint32_t> mask(masker()->mask_words());
    std::mt19937 rng(1);
    for (int step = 0; step < 200; ++step, ++tokens) {
      c.allowed_tokens(mask);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < masker()->vocab_size(); ++t)
        if ((mask[size_t(t) / 32] >> (t % 32)) & 1u) allowed.push_back(t);
      const int32_t pick = allowed[rng() % allowed.size()];
      c.accept(pick);
      if (c.matcher().is_finished()) break;
    }
  }
  state.SetItemsProcessed(tokens);
}
void BM_GenerateUnboundedStrings(benchmark::State& s) {
  generate(s, R"({"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},
                 "days":{"type":"integer"}},"required":["city","unit","days"]})");
}
void BM_GenerateBoundedString(benchmark::State& s) {
  generate(s, R"({"type":"object","properties":{"note":{"type":"string","maxLength":40}},"required":["note"]})");
}
// The same generation twice, a string without and with a maxLength it never reaches: the same tokens and
// masks, so the per-token costs compare the two ways of computing them.
void BM_GenerateLongString(benchmark::State& s) {
  generate(s, R"({"type":"object","properties":{"note":{"type":"string"}},"required":["note"]})");
}
void BM_GenerateLongBoundedString(benchmark::State& s) {
  generate(s, R"({"type":"object","properties":{"note":{"type":"string","maxLength":100000}},"required":["note"]})");
}

BENCHMARK(BM_WalkInsideString)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_WalkInsideBoundedString)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_WalkInsideEnumLiteral)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_WalkAfterComma)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CountingWalkInsideBoundedString)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TokenInsideString)->Unit(benchmark::kMicrosecond)->Iterations(20000);
BENCHMARK(BM_TokenInsideBoundedString)->Unit(benchmark::kMicrosecond)->Iterations(20000);
BENCHMARK(BM_FillNearMaxLength)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GenerateUnboundedStrings)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_GenerateBoundedString)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_GenerateLongString)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_GenerateLongBoundedString)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
