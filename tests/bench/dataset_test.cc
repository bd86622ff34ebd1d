// Datasets: random prompts have the lengths vLLM's range rule allows and ids below the plain-token count;
// file prompts in each accepted line form, read again from the top when the file is short.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "bench/serve/dataset.h"
#include "test_seed.h"

namespace rill::bench::serve {
namespace {

TEST(RandomDataset, ExactLengthsWithoutRange) {
  const uint32_t seed = testing::test_seed();
  SCOPED_TRACE(seed);
  auto p = random_dataset({.input_len = 37, .output_len = 5, .range_ratio = 0}, 20, 1000, seed);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->size(), 20u);
  for (const BenchPrompt& b : *p) {
    ASSERT_TRUE(b.prompt.is_array());
    EXPECT_EQ(b.prompt.size(), 37u);
    EXPECT_EQ(b.output_len, 5);
    for (const auto& id : b.prompt) EXPECT_TRUE(id.get<int>() >= 0 && id.get<int>() < 1000);
  }
}

TEST(RandomDataset, LengthsStayInTheRange) {
  const uint32_t seed = testing::test_seed();
  SCOPED_TRACE(seed);
  auto p = random_dataset({.input_len = 100, .output_len = 10, .range_ratio = 0.25}, 400, 50, seed);
  ASSERT_TRUE(p.ok());
  std::set<size_t> seen;
  for (const BenchPrompt& b : *p) {
    EXPECT_TRUE(b.prompt.size() >= 75 && b.prompt.size() <= 125) << b.prompt.size();
    EXPECT_TRUE(b.output_len >= 7 && b.output_len <= 13) << b.output_len;  // floor(7.5), ceil(12.5)
    seen.insert(b.prompt.size());
  }
  EXPECT_GT(seen.size(), 20u);  // 51 lengths are possible: 400 draws see most of them
  EXPECT_FALSE(random_dataset({.range_ratio = 1.0}, 1, 50, seed).ok());
}

TEST(FileDataset, LineFormsAndWrapAround) {
  const auto path =
      std::filesystem::temp_directory_path() / ("rill_dataset_" + std::to_string(getpid()) + ".jsonl");
  std::ofstream(path) << "{\"prompt\": \"first\", \"output_len\": 9}\n\n"
                         "\"a JSON string\"\n"
                         "[1, 2, 3]\n"
                         "plain text line  \n"
                         "{\"prompt\": [4, 5], \"max_tokens\": 3}\n";
  auto p = file_dataset(path, 7, 16);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->size(), 7u);
  EXPECT_EQ((*p)[0].prompt, "first");
  EXPECT_EQ((*p)[0].output_len, 9);
  EXPECT_EQ((*p)[1].prompt, "a JSON string");
  EXPECT_EQ((*p)[1].output_len, 16);
  EXPECT_EQ((*p)[2].prompt, nlohmann::ordered_json::parse("[1,2,3]"));
  EXPECT_EQ((*p)[3].prompt, "plain text line");
  EXPECT_EQ((*p)[4].prompt, nlohmann::ordered_json::parse("[4,5]"));
  EXPECT_EQ((*p)[4].output_len, 3);
  EXPECT_EQ((*p)[5].prompt, "first");  // read again from the top
  EXPECT_EQ((*p)[6].prompt, "a JSON string");

  std::ofstream(path) << "ok\n{\"prompt\": 5}\n";
  auto bad = file_dataset(path, 2, 16);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path.string() + ":2"), std::string::npos) << bad.status().message();
  std::ofstream(path) << "\n\n";
  EXPECT_FALSE(file_dataset(path, 1, 16).ok());
  std::filesystem::remove(path);
  EXPECT_EQ(file_dataset(path, 1, 16).status().code(), StatusCode::NotFound);
}

// ShareGPT (vLLM's sample_sharegpt_requests): the first turn is the prompt, the reply's token count max_tokens;
// short, long and one-turn entries are skipped. Tokens here are words (the counting function is the caller's).
TEST(ShareGptDataset, FirstTurnPromptReplyLengthAndVllmsFilters) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("rill_sharegpt_" + std::to_string(getpid()) + ".json");
  auto words = [](const std::string& s) {
    int n = 0;
    bool in = false;
    for (char c : s) {
      if (c != ' ' && !in) ++n;
      in = c != ' ';
    }
    return n;
  };
  const std::string long_prompt = [] {
    std::string s;
    for (int i = 0; i < 1100; ++i) s += "w ";
    return s;
  }();
  std::ofstream(path) << nlohmann::ordered_json::array(
      {{{"id", "a"}, {"conversations", {{{"from", "human"}, {"value", "one two three four five"}},
                                        {{"from", "gpt"}, {"value", "a b c d e f"}}}}},
       {{"id", "one turn"}, {"conversations", {{{"from", "human"}, {"value", "only a question here"}}}}},
       {{"id", "short reply"}, {"conversations", {{{"from", "human"}, {"value", "one two three four"}},
                                                  {{"from", "gpt"}, {"value", "no"}}}}},
       {{"id", "long prompt"}, {"conversations", {{{"from", "human"}, {"value", long_prompt}},
                                                  {{"from", "gpt"}, {"value", "a b c d"}}}}},
       {{"id", "b"}, {"conversations", {{{"from", "human"}, {"value", "w x y z"}},
                                        {{"from", "gpt"}, {"value", "1 2 3 4 5 6 7 8"}},
                                        {{"from", "human"}, {"value", "more"}}}}}})
                           .dump();
  auto p = sharegpt_dataset(path, 10, words, 0);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].prompt, "one two three four five");
  EXPECT_EQ((*p)[0].output_len, 6);
  EXPECT_EQ((*p)[1].prompt, "w x y z");
  EXPECT_EQ((*p)[1].output_len, 8);
  p = sharegpt_dataset(path, 1, words, 0);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->size(), 1u);
  // --sharegpt-output-len: every request's max_tokens, and no length filter.
  p = sharegpt_dataset(path, 10, words, 7);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->size(), 4u);
  for (const BenchPrompt& b : *p) EXPECT_EQ(b.output_len, 7);
  std::ofstream(path) << "{\"not\": \"an array\"}";
  EXPECT_FALSE(sharegpt_dataset(path, 10, words, 0).ok());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace rill::bench::serve
