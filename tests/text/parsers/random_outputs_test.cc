// Fuzzing the streaming invariants: random texts stitched from marker pieces, marker prefixes,
// JSON, multi-byte characters and whitespace, for every parser configuration. No expected result
// here: every chunking must agree with the whole text and keep the invariants of output_parser.h.
#include <random>

#include <gtest/gtest.h>

#include "text/parsers/output_parser.h"
#include "text/parsers/parser_harness.h"

namespace rill::text {
namespace {

const std::vector<std::string> kCommon = {
    "text", " ", "\n", "{\"a\": 1}", "{",  "}",  "\"",    ":",      "中文",
    "🎉",    "é", "<",  "[",          "|>", "<|", "&amp;", "&quot;",
};
const std::vector<std::string> kK2 = {
    "<think>",
    "</think>",
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
    "<|im_end|>",
    "[EOS]",
    "[EOT]",
    "<|tool_call",
    "<thi",
    "</",
    "[EO",
    "functions.f:0",
    "functions.g:1",
    "bad id:x",
    "f-1.x:2",
};
const std::vector<std::string> kK3 = {
    "<|open|>think<|sep|>",
    "<|close|>think<|sep|>",
    "<|open|>response<|sep|>",
    "<|close|>response<|sep|>",
    "<|open|>tools<|sep|>",
    "<|close|>tools<|sep|>",
    "<|open|>call tool=\"f\" index=\"1\"<|sep|>",
    "<|open|>argument key=\"k\" type=\"number\"<|sep|>",
    "<|open|>argument key=\"s\" type=\"string\"<|sep|>",
    "<|open|>json type=\"object\"<|sep|>",
    "<|close|>argument<|sep|>",
    "<|close|>json<|sep|>",
    "<|close|>call<|sep|>",
    "<|close|>message<|sep|>",
    "<|end_of_msg|>",
    "<|open|>",
    "<|close|>",
    "<|sep|>",
    "<|open|>resp",
    "<|clo",
    "<|open|>call",
    " tool=\"g\"",
    "12",
    "true",
    "[1, 2]",
    "[EOS]",
};

std::string random_text(std::mt19937_64& rng, const std::vector<std::string>& family) {
  std::uniform_int_distribution<int> length(1, 24);
  std::uniform_int_distribution<size_t> pick_family(0, family.size() - 1);
  std::uniform_int_distribution<size_t> pick_common(0, kCommon.size() - 1);
  std::bernoulli_distribution markup(0.6);
  std::string text;
  for (int n = length(rng); n > 0; --n)
    text += markup(rng) ? family[pick_family(rng)] : kCommon[pick_common(rng)];
  return text;
}

struct FuzzConfig {
  const char* name;
  ParserConfig config;
  const std::vector<std::string>* vocabulary;
};

void PrintTo(const FuzzConfig& c, std::ostream* os) {
  *os << c.name;
}

class RandomOutputs : public ::testing::TestWithParam<FuzzConfig> {};

TEST_P(RandomOutputs, EveryChunkingAgreesWithTheWholeText) {
  uint64_t seed = testing::test_seed() ^ std::hash<std::string>{}(GetParam().name);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 60 && !HasFailure(); ++i) {
    std::string text = random_text(rng, *GetParam().vocabulary);
    SCOPED_TRACE("text: " + text);
    testing::check_all_chunkings(GetParam().config, text, 20, rng());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Parsers, RandomOutputs,
    ::testing::Values(
        FuzzConfig{"k2", {.family = ModelFamily::KimiK2}, &kK2},
        FuzzConfig{"k2_in_think", {.family = ModelFamily::KimiK2, .starts_in_reasoning = true}, &kK2},
        FuzzConfig{"k2_instruct", {.family = ModelFamily::KimiK2, .k2_reasoning = false}, &kK2},
        FuzzConfig{"k3_thinking", {.family = ModelFamily::KimiK3, .starts_in_reasoning = true}, &kK3},
        FuzzConfig{"k3_response", {.family = ModelFamily::KimiK3}, &kK3}),
    [](const ::testing::TestParamInfo<FuzzConfig>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace rill::text
