// The prompts of `rill bench serve`: vLLM's random dataset (token ids, so input lengths are exact), a file of
// prompts (--dataset-name file), vLLM's ShareGPT JSON, or a downloaded Hugging Face dataset's JSON files (hf).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
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

// vLLM's ShareGPT dataset (ShareGPT_V3_unfiltered_cleaned_split.json): a JSON array of {"conversations":
// [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}, ...]}; each entry with two turns gives the
// first as the prompt and the second's token count (`count_tokens`) as max_tokens, or `fixed_output_len` when
// > 0 (--sharegpt-output-len). As vLLM's sample_sharegpt_requests: entries whose prompt or reply has fewer
// than 4 tokens, a prompt over 1024 or both over 2048 are skipped (unless the output length is fixed); the
// entries are taken in order, `n` of them (fewer when the file has fewer).
Result<std::vector<BenchPrompt>> sharegpt_dataset(const std::filesystem::path& path, int n,
                                                  const std::function<int(const std::string&)>& count_tokens,
                                                  int fixed_output_len);

// vLLM's --dataset-name hf, from files on disk: a Hugging Face dataset downloaded with
// `huggingface-cli download --repo-type dataset NAME --local-dir DIR` (or one of its files). `path` is a
// .jsonl/.json file or a directory searched for them (sorted by path; with `split`, only files whose name
// holds it, as HF names its split files: train-*.jsonl, test.json, ...). A record's prompt is the first match
// of: "messages" (OpenAI chat: the first user message's content), "conversations" (ShareGPT: the first human
// or user turn), "prompt", "instruction" (with "input" appended after a blank line when non-empty),
// "question", "problem", "text"; records with none are skipped. max_tokens: the record's "output_len" or
// "max_tokens", else `default_output_len` (--hf-output-len). Parquet files are refused with how to convert
// them (rill has no Parquet reader). The first `n` prompts, read again from the top while fewer were found.
Result<std::vector<BenchPrompt>> hf_dataset(const std::filesystem::path& path, int n, int default_output_len,
                                            const std::string& split);

}  // namespace rill::bench::serve
