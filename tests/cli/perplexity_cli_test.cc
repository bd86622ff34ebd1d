// rill perplexity end to end: its figure against one this test computes from per-position logits (`rill
// logits` per window, log-softmax here, each target scored by the window this test derives for it in closed
// form), and against transformers' own logits of a fixture; plus clear errors for bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>
#include "cli/run_rill.h"

#include "io/safetensors.h"
#include "model/fixture.h"

namespace rill {
namespace {

namespace fs = std::filesystem;
using testing::run_rill;

constexpr const char* kText =
    "Licensed under the Apache License, Version 2.0 (the \"License\"); you may not use this file except in "
    "compliance with the License. You may obtain a copy of the License at the address below. Unless required "
    "by "
    "applicable law or agreed to in writing, software distributed under the License is distributed on an "
    "\"AS "
    "IS\" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the License "
    "for "
    "the specific language governing permissions and limitations under the License. Grant of Copyright "
    "License. "
    "Subject to the terms and conditions of this License, each Contributor hereby grants to You a perpetual, "
    "worldwide, non-exclusive, no-charge, royalty-free, irrevocable copyright license to reproduce, prepare "
    "Derivative Works of, publicly display, publicly perform, sublicense, and distribute the Work and such "
    "Derivative Works in Source or Object form.";

struct PerplexityTest : ::testing::Test {
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("rill_cli_ppl_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ASSERT_EQ(run_rill("tiny-model " + (dir_ / "m").string() + " --force").code, 0);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::vector<int32_t> tokenize(const fs::path& text_file) {
    const auto r = run_rill("tokenize " + (dir_ / "m").string() + " < " + text_file.string());
    EXPECT_EQ(r.code, 0) << r.out;
    return nlohmann::json::parse(r.out).get<std::vector<int32_t>>();
  }

  // log p(ids[t] | ids[b..t-1]) for every t in (b, e), from `rill logits` over ids[b, e - 1).
  static std::vector<double> log_probs(const fs::path& model, const std::vector<int32_t>& ids, size_t b,
                                       size_t e) {
    std::string list;
    for (size_t i = b; i + 1 < e; ++i) list += (i > b ? "," : "") + std::to_string(ids[i]);
    const fs::path out = dir_ / "logits.safetensors";
    const auto r = run_rill("logits " + model.string() + " --device cpu --prompt-ids " + list + " --out " +
                            out.string());
    EXPECT_EQ(r.code, 0) << r.out;
    auto f = io::SafetensorsFile::open(out);
    EXPECT_TRUE(f.ok());
    const io::TensorInfo* t = f->find("logits");
    const int64_t V = t->shape[1];
    const float* x = static_cast<const float*>(f->view(*t).data);
    std::vector<double> lp;
    for (size_t row = 0; row + 1 < e - b; ++row) {
      const float* l = x + row * V;
      double mx = l[0], sum = 0;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(l[v]));
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(l[v]) - mx);
      lp.push_back(double(l[ids[b + row + 1]]) - mx - std::log(sum));
    }
    return lp;
  }

  // Target t is scored by the first window that holds t - 1 and t: the one starting at the smallest multiple
  // of `stride` above t - context; when that start is t itself (stride == context), nothing predicts t.
  static std::pair<double, int> expected(const fs::path& model, const std::vector<int32_t>& ids, int context,
                                         int stride) {
    std::map<int64_t, std::vector<double>> windows;
    double nll = 0;
    int n = 0;
    for (int64_t t = 1; t < int64_t(ids.size()); ++t) {
      const int64_t over = t - context + 1;
      const int64_t b = over <= 0 ? 0 : (over + stride - 1) / stride * stride;
      if (b > t - 1) continue;
      auto it = windows.find(b);
      if (it == windows.end())
        it = windows.emplace(b, log_probs(model, ids, b, std::min<size_t>(b + context, ids.size()))).first;
      nll -= it->second[t - b - 1];
      ++n;
    }
    return {std::exp(nll / n), n};
  }

  static nlohmann::json perplexity(const std::string& args) {
    const auto r = run_rill("perplexity " + args + " --device cpu --json");
    EXPECT_EQ(r.code, 0) << r.out;
    return nlohmann::json::parse(r.out.substr(r.out.rfind('{')));
  }

  static fs::path dir_;
};
fs::path PerplexityTest::dir_;

TEST_F(PerplexityTest, MatchesPerPositionLogitsForEveryWindowing) {
  const fs::path text = dir_ / "text.txt";
  std::ofstream(text) << kText;
  const std::vector<int32_t> ids = tokenize(text);
  ASSERT_GT(ids.size(), 150u);
  struct Case {
    int context, stride;
  };
  for (const Case c : {Case{64, 64}, Case{64, 24}, Case{50, 49}, Case{int(ids.size()) + 10, 0}}) {
    SCOPED_TRACE("context " + std::to_string(c.context) + " stride " + std::to_string(c.stride));
    const auto got = perplexity((dir_ / "m").string() + " " + text.string() + " --context " +
                                std::to_string(c.context) + " --stride " + std::to_string(c.stride));
    const auto [ppl, n] = expected(dir_ / "m", ids, c.context, c.stride ? c.stride : c.context);
    EXPECT_EQ(got["tokens"].get<int>(), n);
    EXPECT_NEAR(got["perplexity"].get<double>() / ppl, 1.0, 1e-4) << got.dump() << " want " << ppl;
    EXPECT_GT(ppl, 1.0);
  }
}

TEST_F(PerplexityTest, FileShorterThanOneWindowAndChunkedPrefill) {
  const fs::path text = dir_ / "short.txt";
  std::ofstream(text) << "Licensed under the Apache License, Version 2.0.";
  const std::vector<int32_t> ids = tokenize(text);
  ASSERT_GE(ids.size(), 5u);
  ASSERT_LT(ids.size(), 512u);
  const auto [ppl, n] = expected(dir_ / "m", ids, 512, 512);
  EXPECT_EQ(n, int(ids.size()) - 1);
  for (const char* extra : {"", " --chunk 3"}) {
    const auto got = perplexity((dir_ / "m").string() + " " + text.string() + extra);
    EXPECT_EQ(got["tokens"].get<int>(), n);
    EXPECT_EQ(got["windows"].get<int>(), 1);
    EXPECT_NEAR(got["perplexity"].get<double>() / ppl, 1.0, 1e-4) << extra;
  }
}

// Independent of rill's forward: transformers' fp32 logits of a 160-token prompt of the fixture (one window).
TEST_F(PerplexityTest, MatchesTransformersOnAFixture) {
  const fs::path fixture = testing::data_dir() / "kimi_linear_tiny_b";
  testing::Reference ref(fixture);
  const auto ids = ref.ints("prompt_4");
  const auto logits = ref.floats("logits_4");
  const size_t V = logits.size() / ids.size();
  double nll = 0;
  for (size_t t = 1; t < ids.size(); ++t) {
    const float* l = logits.data() + (t - 1) * V;
    double mx = l[0], sum = 0;
    for (size_t v = 0; v < V; ++v) mx = std::max(mx, double(l[v]));
    for (size_t v = 0; v < V; ++v) sum += std::exp(double(l[v]) - mx);
    nll += mx + std::log(sum) - l[ids[t]];
  }
  const double want = std::exp(nll / double(ids.size() - 1));
  const fs::path bin = dir_ / "prompt_4.bin";
  {
    std::ofstream f(bin, std::ios::binary);
    for (int32_t id : ids)
      for (int b = 0; b < 4; ++b) f.put(char((uint32_t(id) >> (8 * b)) & 0xFF));
  }
  const auto got = perplexity(fixture.string() + " " + bin.string() + " --ids --context 160");
  EXPECT_EQ(got["tokens"].get<size_t>(), ids.size() - 1);
  EXPECT_NEAR(got["perplexity"].get<double>() / want, 1.0, 1e-3) << got.dump() << " want " << want;
}

TEST_F(PerplexityTest, ClearErrors) {
  const std::string m = (dir_ / "m").string();
  const fs::path text = dir_ / "err.txt";
  std::ofstream(text) << kText;
  std::ofstream(dir_ / "one.txt") << "A";
  std::ofstream(dir_ / "odd.bin") << "abcde";
  struct Case {
    std::string args, fragment;
  };
  const std::vector<Case> cases = {
      {m + " " + text.string() + " --strid 4", "--stride"},
      {m + " /nonexistent/file.txt", "cannot open /nonexistent/file.txt"},
      {m + " " + text.string() + " --context 100000", "--context 100000 is larger than the model's 65536"},
      {m + " " + text.string() + " --context 32 --stride 64", "--stride 64 is larger than --context 32"},
      {m + " " + text.string() + " --context 1", "--context"},
      {m + " " + (dir_ / "one.txt").string(), "at least 2 are needed"},
      {m + " " + (dir_ / "odd.bin").string() + " --ids", "not a whole number of int32 token ids"},
      {"/nonexistent/model " + text.string(), "/nonexistent/model/config.json"},
  };
  for (const auto& c : cases) {
    const auto r = run_rill("perplexity " + c.args + " --device cpu");
    EXPECT_NE(r.code, 0) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.fragment), std::string::npos) << c.args << "\n" << r.out;
  }
}

}  // namespace
}  // namespace rill
