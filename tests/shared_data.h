// Test data that is not in the repository (design.md §6): the real Kimi vocabulary and real chat templates,
// under RILL_SHARED_DIR (../shared beside the checkout unless configured with -DRILL_SHARED_DIR=DIR). A clone
// without it still passes: a test that needs a missing file skips and names the file and how to get it;
// under CI=true (as .ci/run is run) a missing file fails the test instead, so CI never passes by skipping.
// The node tests do the same through tests/shared_data.mjs.
//
//   TEST(Tokenizer, RealVocabulary) {
//     RILL_REQUIRE_KIMI_TOKENIZER();  // first, before anything loads the files
//     auto t = Tokenizer::load(rill::testing::shared_path(rill::testing::kKimiTokenizerDir));
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "test_paths.h"

namespace rill::testing {

inline constexpr const char* kKimiTokenizerDir = "tokenizers/kimi";
inline constexpr const char* kKimiTiktokenModel = "tokenizers/kimi/tiktoken.model";
inline constexpr const char* kKimiTokenizerConfig = "tokenizers/kimi/tokenizer_config.json";

// RILL_SHARED_DIR / relative (whether or not it exists).
inline std::filesystem::path shared_path(std::string_view relative) {
  return std::filesystem::path(shared_dir()) / relative;
}

// CI=true (or 1): shared data must be present.
inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && (std::string_view(ci) == "true" || std::string_view(ci) == "1");
}

// "" when every file exists; else one line naming the missing ones and how to get them.
inline std::string missing_shared_files(const std::vector<std::string>& relative_paths) {
  std::string missing;
  bool tokenizer = false, templates = false;
  for (const std::string& relative : relative_paths) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(shared_path(relative), ec)) continue;
    missing += (missing.empty() ? "" : ", ") + shared_path(relative).string();
    tokenizer |= relative.starts_with(kKimiTokenizerDir);
    templates |= relative.starts_with("chat_templates/");
  }
  if (missing.empty()) return missing;
  std::string message = "missing shared test data: " + missing + ".";
  if (tokenizer) {
    message +=
        " tiktoken.model and tokenizer_config.json come with any Kimi checkpoint on Hugging Face (e.g. "
        "`huggingface-cli download moonshotai/Kimi-Linear-48B-A3B-Instruct tiktoken.model "
        "tokenizer_config.json --local-dir " +
        shared_path(kKimiTokenizerDir).string() + "`).";
  }
  if (templates) message += " The chat templates are listed in tests/README.md.";
  return message + " Configure with -DRILL_SHARED_DIR=DIR to use another directory (tests/README.md).";
}

}  // namespace rill::testing

// Skips the calling test when a shared file is missing (the message says which and how to get it), or fails
// it under CI=true. The argument is a braced list or a vector of paths relative to RILL_SHARED_DIR. Use it in
// a TEST body (or SetUp) before anything reads the files.
#define RILL_REQUIRE_SHARED_FILES(...)                                                    \
  do {                                                                                    \
    const std::string rill_missing_ = ::rill::testing::missing_shared_files(__VA_ARGS__); \
    if (rill_missing_.empty()) break;                                                     \
    if (::rill::testing::in_ci()) FAIL() << rill_missing_ << " (CI=true: required)";      \
    GTEST_SKIP() << rill_missing_;                                                        \
  } while (0)

// The real Kimi vocabulary (tokenizers/kimi), what most of these tests need.
#define RILL_REQUIRE_KIMI_TOKENIZER() \
  RILL_REQUIRE_SHARED_FILES({::rill::testing::kKimiTiktokenModel, ::rill::testing::kKimiTokenizerConfig})
