// Absurd flags and unservable checkpoints (issue #14 item 8), through the rill binary: every numeric flag
// that sizes something is range-checked by the flag parser, naming the flag; and `rill serve` on a checkpoint
// it cannot serve exits 1 at start-up with the reason (not a healthy server that refuses every request, nor
// an abort on std::bad_alloc). `timeout -k 5 60` ends a serve that wrongly starts (exit 124), or one that
// hangs in its listener after a fast load failure (137: issue #14 item 7, the HTTP layer's).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "cli/run_rill.h"

namespace rill {
namespace {

namespace fs = std::filesystem;
using testing::run_rill;

fs::path temp_dir(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() / ("rill_limits_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Out-of-range values of the flags that size memory or time; each is refused by the parser (CLI11's
// validation exit code) before any file is read, so MODEL_DIR need not exist.
TEST(FlagRanges, EveryNumericFlagIsRangeCheckedAndNamed) {
  struct Case {
    std::string args, flag;
  };
  const std::string dir = "/nonexistent/model";
  const std::vector<Case> cases = {
      {"serve " + dir + " --max-batch-size 100000", "--max-batch-size"},
      {"serve " + dir + " --max-num-seqs 100000", "--max-batch-size"},  // the vLLM spelling
      {"serve " + dir + " --max-num-tokens 2000000", "--max-num-tokens"},
      {"serve " + dir + " --max-model-len 20000000", "--max-model-len"},
      {"serve " + dir + " --num-kv-blocks 1000000000", "--num-kv-blocks"},
      {"serve " + dir + " --kda-snapshot-interval 100000000", "--kda-snapshot-interval"},
      {"serve " + dir + " --kda-snapshot-budget 100000000", "--kda-snapshot-budget"},
      {"serve " + dir + " --max-queue 2000000", "--max-queue"},
      {"serve " + dir + " --shutdown-timeout 1000000", "--shutdown-timeout"},
      {"serve " + dir + " --http-threads 100000", "--http-threads"},
      {"serve " + dir + " --max-request-bytes 10000000000", "--max-request-bytes"},
      {"chat " + dir + " --max-tokens 20000000", "--max-tokens"},
      {"chat " + dir + " --max-model-len 20000000", "--max-model-len"},
      {"generate " + dir + " --prompt-ids 1 --max-tokens 20000000", "--max-tokens"},
      {"generate " + dir + " --prompt-ids 1 --top-k 20000000", "--top-k"},
      {"generate " + dir + " --prompt-ids 1 --chunk 2000000", "--chunk"},
      {"generate " + dir + " --prompt-ids 1 --temperature 1000", "--temperature"},
      {"logits " + dir + " --prompt-ids 1 --out /tmp/x.safetensors --chunk 2000000", "--chunk"},
      {"bench " + dir + " --decode-batches 1,100000", "--decode-batches"},
      {"bench " + dir + " --decode-context 0", "--decode-context"},
      {"bench " + dir + " --prefill-tokens 2000000", "--prefill-tokens"},
      {"bench " + dir + " --prefill-batch 100000", "--prefill-batch"},
      {"bench " + dir + " --repeats 0", "--repeats"},
      {"bench " + dir + " --max-num-tokens 0", "--max-num-tokens"},
      {"bench " + dir + " --kda-snapshot-budget 100000000", "--kda-snapshot-budget"},
  };
  for (const Case& c : cases) {
    const auto r = testing::run_rill_with_prefix("timeout -k 5 60 ", c.args);
    EXPECT_NE(r.code, 0) << c.args << "\n" << r.out;
    EXPECT_NE(r.code, 124) << c.args << "\n" << r.out;  // timeout: it started
    EXPECT_NE(r.out.find(c.flag), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find("not in range"), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("config.json"), std::string::npos) << c.args << "\n"
                                                            << r.out;  // refused before loading
  }
}

class UnservableCheckpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    good_ = new fs::path(temp_dir("good"));
    ASSERT_EQ(run_rill("tiny-model " + good_->string() + " --force").code, 0);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*good_);
    delete good_;
  }

  // A copy of the tiny model with config.json edited; `rill serve` on it must exit 1 quickly naming
  // `fragment`.
  static void expect_serve_fails(const std::string& tag, const std::function<void(nlohmann::json&)>& edit,
                                 const std::string& fragment, const std::string& extra_flags = "") {
    const fs::path d = temp_dir(tag);
    fs::copy(*good_, d, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    nlohmann::json j = nlohmann::json::parse(std::ifstream(d / "config.json"));
    edit(j);
    std::ofstream(d / "config.json") << j.dump();
    const auto start = std::chrono::steady_clock::now();
    const auto r = testing::run_rill_with_prefix(
        "timeout -k 5 60 ", "serve " + d.string() + " --port 0 --device cpu " + extra_flags);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(r.code, 1) << r.out;  // 124: it served; 134: it aborted
    EXPECT_NE(r.out.find(fragment), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("exiting: the model failed to load"), std::string::npos) << r.out;
    EXPECT_LT(s, 30.0) << r.out;
    fs::remove_all(d);
  }

  static fs::path* good_;
};
fs::path* UnservableCheckpoint::good_ = nullptr;

TEST_F(UnservableCheckpoint, EosIdThatWouldWrapIntoTheVocabulary) {
  // 2^32 + 1026 narrowed to int32 is 1026 (<|im_end|>): the server used to start and stop on the wrong id.
  expect_serve_fails(
      "eos_wrap", [](nlohmann::json& j) { j["eos_token_id"] = (int64_t(1) << 32) + 1026; },
      "eos_token_id = 4294968322 is outside 0..16777215");
}

TEST_F(UnservableCheckpoint, HiddenSizeThatWouldWrap) {
  expect_serve_fails(
      "hidden_wrap", [](nlohmann::json& j) { j["hidden_size"] = (int64_t(1) << 32) + 128; },
      "hidden_size = 4294967424 is outside 0..65536", "--load-format dummy");
}

TEST_F(UnservableCheckpoint, BillionExpertsAreAConfigErrorNotBadAlloc) {
  expect_serve_fails(
      "experts", [](nlohmann::json& j) { j["num_experts"] = 1000000000; },
      "num_experts = 1000000000 is outside 0..4096", "--load-format dummy");
}

TEST_F(UnservableCheckpoint, DummyWeightsLargerThanTheMachine) {
  // hidden 2^16, moe_intermediate 2^20: each of the 3 MoE layers' 8 routed + 1 shared experts is
  // 3 x 2^16 x 2^20 bf16 values = 384 GiB, 10 TiB in all.
  expect_serve_fails(
      "huge_dummy",
      [](nlohmann::json& j) {
        j["hidden_size"] = 1 << 16;
        j["moe_intermediate_size"] = 1 << 20;
      },
      "the model's weights (--load-format dummy): 10.", "--load-format dummy");
}

TEST_F(UnservableCheckpoint, ModelVocabularySmallerThanTheTokenizer) {
  // BOS and EOS inside the smaller vocabulary: the tokenizer's control block (the chat markers) is not.
  expect_serve_fails(
      "vocab_small",
      [](nlohmann::json& j) {
        j["vocab_size"] = 1000;
        j["bos_token_id"] = 1;
        j["eos_token_id"] = 2;
      },
      "vocab_size 1000 is smaller than the tokenizer's 1280 ids", "--load-format dummy");
}

TEST_F(UnservableCheckpoint, ModelVocabularyFarLargerThanTheTokenizer) {
  expect_serve_fails(
      "vocab_large", [](nlohmann::json& j) { j["vocab_size"] = 65536; },
      "vocab_size 65536 exceeds the tokenizer's 1280 ids by 64256, more than padding", "--load-format dummy");
}

TEST_F(UnservableCheckpoint, CachePlanLargerThanTheMachine) {
  // 2^24 blocks of the tiny model's one MLA layer: 2^24 x 64 tokens x 576 x 4 B = 2.25 TiB.
  expect_serve_fails(
      "cache_plan", [](nlohmann::json&) {}, "16777216 MLA blocks of 64 tokens", "--num-kv-blocks 16777216");
}

}  // namespace
}  // namespace rill
