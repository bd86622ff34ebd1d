// Encode/decode throughput of rill's tokenizer on the mixed ~1 MB corpus
// (tests/text/tokenizer/mixed_corpus.h), and the pre-tokenizer alone: the hand-written scanner vs PCRE2-JIT
// running the same pattern (the
// `&&[^\p{Han}]` intersections rewritten as (?!\p{Han}) look-aheads). tiktoken_bench.mjs times OpenAI's npm
// tiktoken on the same corpus; docs/PERF.md "Tokenizer" keeps the numbers.
//
//   tokenizer_bench [MODEL_DIR]   (default: the shared test data's tokenizers/kimi)
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <benchmark/benchmark.h>

#include <cstdio>
#include <memory>
#include <string>

#include "shared_data.h"
#include "text/tokenizer/kimi_pretokenizer.h"
#include "text/tokenizer/mixed_corpus.h"
#include "text/tokenizer/tokenizer.h"

namespace {

std::string g_model_dir = rill::testing::shared_path(rill::testing::kKimiTokenizerDir).string();

const std::string& corpus() {
  static const std::string c = rill::text::testing::make_mixed_corpus();
  return c;
}

const rill::text::Tokenizer& tokenizer() {
  static const auto* t = [] {
    auto r = rill::text::Tokenizer::load(g_model_dir);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().to_string().c_str());
      std::exit(1);
    }
    return new rill::text::Tokenizer(std::move(r).value());
  }();
  return *t;
}

void BM_Encode(benchmark::State& state) {
  const bool allow_special = state.range(0) != 0;
  size_t n_ids = 0;
  for (auto _ : state) {
    const auto ids = tokenizer().encode(corpus(), allow_special);
    n_ids = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * corpus().size()));
  state.counters["ids"] = static_cast<double>(n_ids);
}
BENCHMARK(BM_Encode)->Arg(0)->Arg(1)->ArgName("allow_special")->Unit(benchmark::kMillisecond);

void BM_Decode(benchmark::State& state) {
  const auto ids = tokenizer().encode(corpus(), false);
  for (auto _ : state) {
    auto text = tokenizer().decode(ids);
    benchmark::DoNotOptimize(text->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * corpus().size()));
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);

void BM_PreTokenizeScanner(benchmark::State& state) {
  const rill::text::KimiPreTokenizer pre;
  size_t n_pieces = 0;
  for (auto _ : state) {
    n_pieces = 0;
    pre.split(corpus(), [&](std::string_view) { ++n_pieces; });
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * corpus().size()));
  state.counters["pieces"] = static_cast<double>(n_pieces);
}
BENCHMARK(BM_PreTokenizeScanner)->Unit(benchmark::kMillisecond);

// The spec's pattern for PCRE2: intersections become look-aheads (PCRE2 has no `&&`).
constexpr char kPcre2Pattern[] =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

void BM_PreTokenizePcre2Jit(benchmark::State& state) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)> code(
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPcre2Pattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                    &error, &offset, nullptr),
      pcre2_code_free);
  if (!code || pcre2_jit_compile(code.get(), PCRE2_JIT_COMPLETE) != 0) {
    state.SkipWithError("PCRE2 compile / JIT failed");
    return;
  }
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(code.get(), nullptr), pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(corpus().data());
  size_t n_pieces = 0;
  for (auto _ : state) {
    n_pieces = 0;
    for (PCRE2_SIZE pos = 0; pos < corpus().size();) {
      if (pcre2_jit_match(code.get(), subject, corpus().size(), pos, PCRE2_NO_UTF_CHECK, match.get(),
                          nullptr) < 0)
        break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match.get());
      pos = ov[1] > ov[0] ? ov[1] : ov[0] + 1;
      ++n_pieces;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * corpus().size()));
  state.counters["pieces"] = static_cast<double>(n_pieces);
}
BENCHMARK(BM_PreTokenizePcre2Jit)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (argc > 1) g_model_dir = argv[1];
  std::printf("corpus: %zu bytes\n", corpus().size());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
