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

// A downloaded Hugging Face dataset (the layouts `huggingface-cli download --repo-type dataset` leaves): records'
// prompt fields by the documented order, the split filter, the subset folder, Parquet refused with a way out.
TEST(HfDataset, RecordFieldsSplitsAndParquet) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("rill_hf_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "data");
  fs::create_directories(dir / ".cache");
  std::ofstream(dir / "data" / "train-00000.jsonl")
      << R"({"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "chat prompt"}]})" "\n"
      << R"({"conversations": [{"from": "human", "value": "sharegpt prompt"}, {"from": "gpt", "value": "r"}]})" "\n"
      << R"({"instruction": "Fix it.", "input": "x = 1 +", "output": "x = 1 + 1"})" "\n"
      << R"({"id": 7})" "\n"  // no prompt field: skipped
      << R"({"question": "2 + 2?", "max_tokens": 5})" "\n";
  std::ofstream(dir / "data" / "test.json") << R"([{"problem": "test problem"}, {"prompt": "p", "output_len": 3}])";
  std::ofstream(dir / ".cache" / "train-junk.jsonl") << "not json\n";  // hidden folders are not read
  auto train = hf_dataset(dir, 5, 64, "train");
  ASSERT_TRUE(train.ok()) << train.status().to_string();
  ASSERT_EQ(train->size(), 5u);
  EXPECT_EQ((*train)[0].prompt, "chat prompt");
  EXPECT_EQ((*train)[1].prompt, "sharegpt prompt");
  EXPECT_EQ((*train)[2].prompt, "Fix it.\n\nx = 1 +");
  EXPECT_EQ((*train)[3].prompt, "2 + 2?");
  EXPECT_EQ((*train)[3].output_len, 5);
  EXPECT_EQ((*train)[0].output_len, 64);
  EXPECT_EQ((*train)[4].prompt, "chat prompt");  // read again from the top
  auto all = hf_dataset(dir / "data", 6, 64, "");  // sorted: test.json before train-00000.jsonl
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  EXPECT_EQ((*all)[0].prompt, "test problem");
  EXPECT_EQ((*all)[1].output_len, 3);
  EXPECT_EQ((*all)[2].prompt, "chat prompt");
  EXPECT_FALSE(hf_dataset(dir, 1, 64, "validation").ok());

  const fs::path pq = fs::temp_directory_path() / ("rill_hf_pq_" + std::to_string(getpid()));
  fs::create_directories(pq);
  std::ofstream(pq / "train-00000-of-00001.parquet") << "PAR1";
  auto parquet = hf_dataset(pq, 1, 64, "");
  ASSERT_FALSE(parquet.ok());
  EXPECT_NE(parquet.status().message().find("Parquet"), std::string::npos) << parquet.status().message();
  EXPECT_NE(parquet.status().message().find("read_parquet"), std::string::npos) << parquet.status().message();
  EXPECT_EQ(hf_dataset(pq / "missing", 1, 64, "").status().code(), StatusCode::NotFound);
  std::ofstream(dir / "data" / "test.json") << "[1, 2]";
  auto bad = hf_dataset(dir / "data", 1, 64, "test");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("test.json[0]"), std::string::npos) << bad.status().message();
  fs::remove_all(dir);
  fs::remove_all(pq);
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
