// rill train-tokenizer end to end: the vocabulary it writes loads as a checkpoint's tokenizer (ranks, control
// block, chat template), its --encode files hold the ids that decode back to the text byte for byte, and bad
// input is named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>
#include "cli/run_rill.h"

namespace rill {
namespace {

namespace fs = std::filesystem;
using testing::run_rill;

TEST(TrainTokenizer, WritesALoadableVocabularyAndIdFiles) {
  const fs::path d = fs::temp_directory_path() / ("rill_cli_bpe_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  const std::string corpus =
      "The jury said it did find that many of the registration and election laws are outmoded.\n"
      "The jury further said in term-end presentments that the City Executive Committee deserves praise.\n";
  std::string text;
  for (int i = 0; i < 20; ++i) text += corpus;
  std::ofstream(d / "train.txt") << text;
  std::ofstream(d / "other.txt") << "Jury laws, élection 2.0 <|im_end|>";
  auto r = run_rill("train-tokenizer " + (d / "train.txt").string() + " " + (d / "vocab").string() +
                    " --ranks 300 --encode " + (d / "train.txt").string() + " --encode " +
                    (d / "other.txt").string());
  ASSERT_EQ(r.code, 0) << r.out;

  std::ifstream ranks(d / "vocab" / "tiktoken.model");
  EXPECT_EQ(std::count(std::istreambuf_iterator<char>(ranks), std::istreambuf_iterator<char>(), '\n'), 300);
  const auto config = nlohmann::json::parse(std::ifstream(d / "vocab" / "tokenizer_config.json"));
  EXPECT_EQ(config["added_tokens_decoder"]["302"]["content"], "<|im_end|>");  // the control block follows
  EXPECT_NE(config["chat_template"].get<std::string>().find("<|im_assistant|>"), std::string::npos);

  for (const char* name : {"train", "other"}) {
    SCOPED_TRACE(name);
    std::ifstream bin(d / (std::string(name) + ".bin"), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
    ASSERT_EQ(bytes.size() % 4, 0u);
    nlohmann::json ids = nlohmann::json::array();
    for (size_t i = 0; i < bytes.size(); i += 4) {
      const auto* b = reinterpret_cast<const unsigned char*>(bytes.data() + i);
      ids.push_back(int32_t(b[0] | b[1] << 8 | b[2] << 16 | uint32_t(b[3]) << 24));
    }
    std::ofstream(d / "ids.json") << ids.dump();
    r = run_rill("detokenize " + (d / "vocab").string() + " < " + (d / "ids.json").string());
    ASSERT_EQ(r.code, 0) << r.out;
    std::ifstream src(d / (std::string(name) + ".txt"));
    const std::string want((std::istreambuf_iterator<char>(src)), std::istreambuf_iterator<char>());
    EXPECT_NE(r.out.find(want), std::string::npos) << r.out;
    for (const auto& id : ids) EXPECT_LT(id.get<int>(), 300) << "special names are encoded as text";
    if (std::string(name) == "train") {
      EXPECT_LT(ids.size(), want.size() * 2 / 3) << "44 merges already join the frequent pairs";
    }
  }

  r = run_rill("train-tokenizer /nonexistent/corpus.txt " + (d / "v2").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("cannot open /nonexistent/corpus.txt"), std::string::npos) << r.out;
  r = run_rill("train-tokenizer " + (d / "other.txt").string() + " " + (d / "v3").string() + " --ranks 5000");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--ranks 5000"), std::string::npos) << r.out;
  fs::remove_all(d);
}

}  // namespace
}  // namespace rill
