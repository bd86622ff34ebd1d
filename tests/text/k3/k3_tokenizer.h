// The tokenizer K3 tests run on: the real Kimi ranks (shared test data, tokenizers/kimi) with K3's
// control-block names. K3 reuses the K2 vocabulary file; only the names of the control block differ (spec
// §6.3). Built once per test program; a test calls RILL_REQUIRE_KIMI_TOKENIZER() first (it skips where the
// file is missing).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

#include "shared_data.h"
#include "text/tokenizer/bpe_trainer.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::text::k3 {

inline const Tokenizer& k3_tokenizer() {
  static const Tokenizer* tokenizer = [] {
    namespace fs = std::filesystem;
    const fs::path config =
        fs::temp_directory_path() / ("rill_k3_config_" + std::to_string(std::random_device{}()));
    EXPECT_TRUE(write_tokenizer_config(config, 163584, ControlBlockLayout::K3).ok());
    auto t = Tokenizer::from_files(rill::testing::shared_path(rill::testing::kKimiTiktokenModel), config);
    fs::remove(config);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return new Tokenizer(std::move(t).value());
  }();
  return *tokenizer;
}

}  // namespace rill::text::k3
