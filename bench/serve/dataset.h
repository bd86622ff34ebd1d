// The prompts of `rill bench serve`: vLLM's random dataset (token ids, so input lengths are exact) or a file
// of prompts (--dataset-name file).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace rill::bench::serve {

struct BenchPrompt {
  nlohmann::ordered_json prompt;  // a string, or an array of token ids
  int output_len = 0;             // max_tokens of the request
};

struct RandomDatasetOptions {
  int input_len = 1024;    // --random-input-len
  int output_len = 128;    // --random-output-len
  double range_ratio = 0;  // --random-range-ratio: lengths uniform in [len * (1 - r), len * (1 + r)]
};

// `n` prompts of ids drawn uniformly from [0, n_plain_ids) (the tokenizer's BPE ranks: no control tokens).
Result<std::vector<BenchPrompt>> random_dataset(const RandomDatasetOptions& o, int n, int32_t n_plain_ids,
                                                uint64_t seed);

// `n` prompts from a file, one per line: a JSON object {"prompt": "text" or [ids], "output_len": N} (or
// "max_tokens"), a JSON string, a JSON array of ids, or else the line itself as text. Blank lines are
// skipped; the file is read again from the top while fewer than `n` were read. A prompt without its own
// length gets `default_output_len`.
Result<std::vector<BenchPrompt>> file_dataset(const std::filesystem::path& path, int n,
                                              int default_output_len);

}  // namespace rill::bench::serve
