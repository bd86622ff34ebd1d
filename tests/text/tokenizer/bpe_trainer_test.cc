// The BPE trainer and the model-directory writers: a trained vocabulary loads through Tokenizer::load and
// round-trips; the control-block layout matches the real Kimi config.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "shared_data.h"
#include "text/tokenizer/bpe_trainer.h"
#include "text/tokenizer/mixed_corpus.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::text {
namespace {

namespace fs = std::filesystem;

struct TrainedDir {
  fs::path path;
  std::vector<std::string> ranks;
  ~TrainedDir() { fs::remove_all(path); }
};

const std::string& corpus() {
  static const std::string c = testing::make_mixed_corpus(200'000);
  return c;
}

TEST(BpeTrainer, TrainWriteLoadRoundTrip) {
  constexpr int kRanks = 1500;
  TrainedDir dir{fs::temp_directory_path() / ("rill_bpe_" + std::to_string(std::random_device{}())), {}};
  fs::create_directories(dir.path);
  dir.ranks = train_bpe(corpus(), kRanks);
  ASSERT_EQ(dir.ranks.size(), static_cast<size_t>(kRanks));
  for (int b = 0; b < 256; ++b) ASSERT_EQ(dir.ranks[b], std::string(1, static_cast<char>(b)));
  ASSERT_TRUE(write_tiktoken_model(dir.path / "tiktoken.model", dir.ranks).ok());
  ASSERT_TRUE(write_tokenizer_config(dir.path / "tokenizer_config.json", kRanks).ok());

  auto tok = Tokenizer::load(dir.path);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->n_ranks(), kRanks);
  EXPECT_EQ(tok->vocab_size(), kRanks + 256);
  for (const ControlToken& c : control_block_layout(ControlBlockLayout::KimiLinear)) {
    EXPECT_EQ(tok->token_id(c.name), kRanks + c.offset) << c.name;
  }
  // The trained merges compress their own corpus and every text round-trips.
  const std::vector<int32_t> ids = tok->encode(corpus(), false);
  EXPECT_LT(ids.size(), corpus().size() / 2);
  EXPECT_EQ(*tok->decode(ids), corpus());
  const std::string other = "Unseen text: ζωή, 日本語, \U0001F600, tabs\t\tand\r\nnewlines <|im_end|>";
  EXPECT_EQ(*tok->decode(tok->encode(other, false)), other);
  const auto with_special = tok->encode(other, true);
  EXPECT_EQ(with_special.back(), *tok->token_id("<|im_end|>"));
  EXPECT_EQ(*tok->decode(with_special), other);
}

TEST(BpeTrainer, DeterministicAndDistinct) {
  const auto a = train_bpe(corpus(), 800);
  const auto b = train_bpe(corpus(), 800);
  EXPECT_EQ(a, b);
  std::set<std::string> unique(a.begin(), a.end());
  EXPECT_EQ(unique.size(), a.size());
  // Each merge is the most frequent pair at its time, so the first merges are frequent English bigrams.
  EXPECT_EQ(a[256].size(), 2u);
}

TEST(BpeTrainer, StopsWhenNoPairIsLeft) {
  const auto ranks = train_bpe("ab ab ab", 10'000);
  EXPECT_LT(ranks.size(), 300u);
  EXPECT_GE(ranks.size(), 256u);
  EXPECT_EQ(train_bpe("", 1000).size(), 256u);
}

// The Kimi Linear layout, written for the real vocabulary size, is the real file's added_tokens_decoder.
TEST(BpeTrainer, KimiLinearLayoutMatchesRealConfig) {
  RILL_REQUIRE_KIMI_TOKENIZER();
  const fs::path real = rill::testing::shared_path(rill::testing::kKimiTokenizerConfig);
  const auto want = nlohmann::json::parse(std::ifstream(real))["added_tokens_decoder"];
  std::ifstream model(rill::testing::shared_path(rill::testing::kKimiTiktokenModel));
  int32_t n_ranks = 0;
  for (std::string line; std::getline(model, line);) n_ranks += !line.empty();
  const fs::path out =
      fs::temp_directory_path() / ("rill_cfg_" + std::to_string(std::random_device{}()) + ".json");
  ASSERT_TRUE(write_tokenizer_config(out, n_ranks).ok());
  const auto got = nlohmann::json::parse(std::ifstream(out))["added_tokens_decoder"];
  fs::remove(out);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace rill::text
