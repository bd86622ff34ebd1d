// The rill binary end to end: inspect, generate and logits on the transformers fixtures, the project's own
// tiny model, and clear errors for bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>
#include "cli/run_rill.h"

#include "io/safetensors.h"
#include "model/fixture.h"
#include "model/kimi_linear_48b_config.h"
#include "model/sequence_session.h"

namespace rill {
namespace {

namespace fs = std::filesystem;
using testing::run_rill;

fs::path temp_dir(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() / ("rill_cli_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

TEST(Inspect, RealKimiLinear48bConfigWithoutWeights) {
  const fs::path d = temp_dir("inspect48b");
  std::ofstream(d / "config.json") << kKimiLinear48bConfig;
  const auto r = run_rill("inspect " + d.string());
  EXPECT_NE(r.out.find("(49.1 B)"), std::string::npos) << r.out;  // ≈49.1 B parameters
  EXPECT_NE(r.out.find("8,064 B of MLA latent KV"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("40.00 MiB of fp32 KDA state"), std::string::npos) << r.out;
  // Speculation's checkpoint: the KDA state and the conv windows again.
  EXPECT_NE(r.out.find("speculation  +41.41 MiB per sequence"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("weights      missing"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("27: 20 KDA + 7 MLA"), std::string::npos) << r.out;
  // Described, but not servable: each missing piece is named.
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("validation   FAILED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("weights: no *.safetensors files"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tiktoken.model"), std::string::npos) << r.out;
  fs::remove_all(d);
}

// The mapping plan (numbers: tests/model/parallel_plan_test.cc): K3 does not fit one node of H200s, does fit two
// nodes as PP 2 x TP 8 x EP 8, and a mapping that does not divide is bad input naming the flag.
TEST(Inspect, ParallelPlanFitsOrNamesWhy) {
  auto r = run_rill("inspect --preset kimi-k3 -tp 8 -ep 8");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("does NOT fit 140 GiB x 0.90"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("use more GPUs (-tp, -ep, -pp)"), std::string::npos) << r.out;
  r = run_rill("inspect --preset kimi-k3 -tp 8 -ep 8 -pp 2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("stage 1      layers 46-92"), std::string::npos) << r.out;
  r = run_rill("inspect --preset kimi-linear-48b -tp 3");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("not divisible by --tensor-parallel-size 3"), std::string::npos) << r.out;
  r = run_rill("inspect");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("give MODEL_DIR or --preset NAME"), std::string::npos) << r.out;
}

TEST(Inspect, FixtureWeightsValidateButTheTokenizerIsMissing) {
  const auto r = run_rill("inspect " + (testing::data_dir() / "kimi_linear_tiny_b").string());
  EXPECT_NE(r.out.find("in 2 file(s)"), std::string::npos) << r.out;
  EXPECT_EQ(r.code, 1) << r.out;  // the transformers fixtures carry no tokenizer: serve could not run them
  EXPECT_EQ(r.out.find("validation   ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kimi_linear_tiny_b/tiktoken.model"), std::string::npos) << r.out;
}

// inspect says "validation ok" only for what `rill serve` runs, and names what is missing the way serve does:
// the tokenizer files, BOS/EOS ids inside the vocabulary, the chat template.
TEST(Inspect, ChecksWhatServeNeedsAndAgreesWithServe) {
  const fs::path good = temp_dir("serve_needs");
  ASSERT_EQ(run_rill("tiny-model " + good.string() + " --force").code, 0);
  auto r = run_rill("inspect " + good.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("tokenizer    1280 ids (1024 BPE ranks + 256 control tokens)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("chat         Jinja template (default)"), std::string::npos) << r.out;

  struct Case {
    std::string name;
    std::function<void(const fs::path&)> spoil;
    std::string fragment;  // what inspect and serve both name
    bool serve_fails = true;
  };
  auto edit_json = [](const fs::path& file, const std::function<void(nlohmann::json&)>& f) {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(file));
    f(j);
    std::ofstream(file) << j.dump();
  };
  const std::vector<Case> cases = {
      {"no_tiktoken", [](const fs::path& d) { fs::remove(d / "tiktoken.model"); }, "/tiktoken.model"},
      {"no_tokenizer_config", [](const fs::path& d) { fs::remove(d / "tokenizer_config.json"); },
       "/tokenizer_config.json"},
      {"eos_outside_vocab",
       [&](const fs::path& d) {
         edit_json(d / "config.json", [](nlohmann::json& j) { j["eos_token_id"] = 5000; });
       },
       "eos_token_id 5000 is outside the vocabulary [0, 1280)"},
      {"bos_outside_vocab",
       [&](const fs::path& d) {
         edit_json(d / "config.json", [](nlohmann::json& j) { j["bos_token_id"] = 1280; });
       },
       "bos_token_id 1280 is outside the vocabulary"},
      // serve starts without a template (completions work), so only inspect fails on it.
      {"no_chat_template",
       [&](const fs::path& d) {
         edit_json(d / "tokenizer_config.json", [](nlohmann::json& j) { j.erase("chat_template"); });
       },
       "has no chat template", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path d = temp_dir(c.name);
    fs::copy(good, d, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    c.spoil(d);
    r = run_rill("inspect " + d.string());
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("validation   FAILED"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(c.fragment), std::string::npos) << r.out;
    if (c.serve_fails) {
      // serve fails while loading (exit 1) with the same message; `timeout` ends a serve that wrongly starts.
      r = testing::run_rill_with_prefix("timeout 120 ", "serve " + d.string() + " --port 0 --device cpu");
      EXPECT_EQ(r.code, 1) << r.out;
      EXPECT_NE(r.out.find(c.fragment), std::string::npos) << r.out;
    }
    fs::remove_all(d);
  }
  fs::remove_all(good);
}

TEST(Generate, GreedyMatchesTransformers) {
  const fs::path dir = testing::data_dir() / "kimi_linear_tiny_a";
  testing::Reference ref(dir);
  const auto prompt = ref.ints("prompt_1"), want = ref.ints("greedy_1");
  const auto r = run_rill("generate " + dir.string() +
                          " --device cpu --ignore-eos --max-tokens 12 --prompt-ids " + join(prompt));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(join(want)), std::string::npos) << "got: " << r.out << "\nwant: " << join(want);
}

// --speculative-config: greedy output with n-gram drafts is the transformers greedy output still.
TEST(Generate, SpeculativeConfigKeepsGreedyOutput) {
  const fs::path dir = testing::data_dir() / "kimi_linear_tiny_a";
  testing::Reference ref(dir);
  const auto prompt = ref.ints("prompt_1"), want = ref.ints("greedy_1");
  const auto r = run_rill("generate " + dir.string() +
                          " --device cpu --ignore-eos --max-tokens 12 --prompt-ids " + join(prompt) +
                          " --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 3, "
                          "\"prompt_lookup_max\": 2, \"prompt_lookup_min\": 1}'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(join(want)), std::string::npos) << "got: " << r.out << "\nwant: " << join(want);
}

// --speculative-config draft_model: the same checkpoint as the draft gives the same greedy output.
TEST(Generate, DraftModelKeepsGreedyOutput) {
  const fs::path dir = testing::data_dir() / "kimi_linear_tiny_a";
  testing::Reference ref(dir);
  const auto prompt = ref.ints("prompt_1"), want = ref.ints("greedy_1");
  const auto r = run_rill("generate " + dir.string() +
                          " --device cpu --ignore-eos --max-tokens 12 --prompt-ids " + join(prompt) +
                          " --speculative-config '{\"method\": \"draft_model\", \"num_speculative_tokens\": 3, "
                          "\"model\": \"" + dir.string() + "\"}'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(join(want)), std::string::npos) << "got: " << r.out << "\nwant: " << join(want);
}

// A draft checkpoint that is missing, or whose vocabulary is not the target's: exit 2 before any weights load,
// naming the path (and both sizes), from generate and serve alike.
TEST(Generate, BadDraftModelIsRefusedNamingIt) {
  const std::string dir = (testing::data_dir() / "kimi_linear_tiny_a").string();
  const std::string other_vocab = (testing::data_dir() / "kimi_k3_tiny_c").string();  // 1024 tokens, not 512
  const std::pair<std::string, std::string> cases[] = {
      {"/nonexistent/draft", "--speculative-config \"model\" /nonexistent/draft"},
      {other_vocab, "the draft model's vocabulary has 1024 tokens"},
  };
  for (const auto& [draft, want] : cases) {
    const std::string json = R"({"method": "draft_model", "num_speculative_tokens": 2, "model": ")" + draft + "\"}";
    for (const std::string& cmd : {"generate " + dir + " --device cpu --prompt-ids 1,2,3",
                                   "serve " + dir + " --device cpu --port 0"}) {
      const auto r = run_rill(cmd + " --speculative-config '" + json + "'");
      EXPECT_EQ(r.code, 2) << cmd << ": " << r.out;
      EXPECT_NE(r.out.find(want), std::string::npos) << cmd << ": " << r.out;
    }
  }
}

// Bad --speculative-config values: exit 2 with the key or method named, from generate and serve alike.
TEST(Generate, SpeculativeConfigErrorsNameTheKey) {
  const std::string dir = (testing::data_dir() / "kimi_linear_tiny_a").string();
  const std::pair<std::string, std::string> cases[] = {
      {R"({"method": "ngram", "num_speculative_tokens": 4, "typo": 1})", "unknown key \"typo\""},
      {R"({"method": "ngram", "num_speculative_tokens": 17})", "\"num_speculative_tokens\" 17 must be in [1, 16]"},
      {R"({"method": "mtp", "num_speculative_tokens": 2})", "method \"mtp\" is not built yet"},
      {R"({"method": "suffix", "num_speculative_tokens": 2, "suffix_decoding_max_tree_depth": 1})",
       "\"suffix_decoding_max_tree_depth\" 1 must be in [2, 1024]"},
      // No "model" (the draft checkpoint).
      {R"({"method": "draft_model", "num_speculative_tokens": 2})", "method \"draft_model\""},
  };
  for (const auto& [json, want] : cases) {
    for (const std::string& cmd : {"generate " + dir + " --device cpu --prompt-ids 1,2,3", "serve " + dir + " --device cpu --port 0"}) {
      const auto r = run_rill(cmd + " --speculative-config '" + json + "'");
      EXPECT_EQ(r.code, 2) << cmd << ": " << r.out;
      EXPECT_NE(r.out.find(want), std::string::npos) << cmd << ": " << r.out;
    }
  }
}

TEST(Generate, SeededSamplingIsReproducible) {
  const std::string cmd =
      "generate " + (testing::data_dir() / "kimi_linear_tiny_b").string() +
      " --device cpu --ignore-eos --max-tokens 10 --temperature 1.0 --top-p 0.9 --prompt-ids 5,6,7 --seed ";
  const auto a = run_rill(cmd + "11"), b = run_rill(cmd + "11"), c = run_rill(cmd + "12");
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);  // 10 tokens from a 512-token vocabulary: another seed differs
}

TEST(Logits, WritesEveryPositionLikeTransformers) {
  const fs::path dir = testing::data_dir() / "kimi_linear_tiny_b";
  testing::Reference ref(dir);
  const auto prompt = ref.ints("prompt_3");
  const fs::path out = temp_dir("logits") / "logits.safetensors";
  const auto r = run_rill("logits " + dir.string() + " --device cpu --chunk 16 --out " + out.string() +
                          " --prompt-ids " + join(prompt));
  ASSERT_EQ(r.code, 0) << r.out;
  auto f = io::SafetensorsFile::open(out);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const io::TensorInfo* t = f->find("logits");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (Shape{int64_t(prompt.size()), 512}));
  const float* got = static_cast<const float*>(f->view(*t).data);
  const auto want = ref.floats("logits_3");
  float worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  EXPECT_LE(worst, 1e-3f);
  fs::remove_all(out.parent_path());
}

TEST(TinyModel, BuildsValidatesAndGenerates) {
  const fs::path d = temp_dir("tiny");
  auto r = run_rill("tiny-model " + d.string() + " --force");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* f : {"config.json", "model.safetensors", "tiktoken.model", "tokenizer_config.json"})
    EXPECT_TRUE(fs::exists(d / f)) << f;
  r = run_rill("inspect " + d.string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("validation   ok"), std::string::npos) << r.out;
  r = run_rill("generate " + d.string() +
               " --device cpu --prompt-ids 1,2,3 --max-tokens 5 --ignore-eos --json");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"finish_reason\":\"length\""), std::string::npos) << r.out;
  fs::remove_all(d);
}

TEST(TinyModel, KimiK3InspectsAndGeneratesGreedilyOnTheCpu) {
  const fs::path d = temp_dir("tiny_k3");
  auto r = run_rill("tiny-model " + d.string() + " --kimi-k3 --force");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("kimi_k3, 7 layers"), std::string::npos) << r.out;
  r = run_rill("inspect " + d.string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("validation   ok"), std::string::npos) << r.out;
  // Greedy through the engine (rill generate) equals greedy through a bare SequenceSession.
  const std::vector<int32_t> prompt = {1, 2, 3, 500, 77};
  r = run_rill("generate " + d.string() + " --device cpu --prompt-ids " + join(prompt) +
               " --max-tokens 6 --ignore-eos --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"finish_reason\":\"length\""), std::string::npos) << r.out;
  auto be = backend::make_cpu_backend();
  auto m = model::load_model(d, *be);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_TRUE((*m)->reserve_workspace({16, 1, 16, 64}).ok());
  auto s = model::SequenceSession::create(**m, 64);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->feed(prompt, 0, false).ok());
  std::vector<int32_t> want;
  for (int i = 0; i < 6; ++i) {
    auto next = s->sample(backend::SamplingRow{});
    ASSERT_TRUE(next.ok());
    want.push_back(*next);
    ASSERT_TRUE(s->feed(std::span<const int32_t>(&want.back(), 1), 1, false).ok());
  }
  EXPECT_NE(r.out.find("\"completion_ids\":[" + join(want) + "]"), std::string::npos)
      << r.out << "\nwant " << join(want);
  fs::remove_all(d);
}

TEST(TextCommands, TokenizeDetokenizeRenderRoundTrip) {
  const fs::path d = temp_dir("text");
  ASSERT_EQ(run_rill("tiny-model " + d.string() + " --force").code, 0);
  const fs::path in = d / "in.txt";
  std::ofstream(in) << "Licensed under the Apache License, 版本 2.0 🚀";
  auto r = run_rill("tokenize " + d.string() + " < " + in.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const auto ids = nlohmann::json::parse(r.out);
  ASSERT_TRUE(ids.is_array());
  EXPECT_GT(ids.size(), 5u);
  std::ofstream(d / "ids.json") << ids.dump();
  r = run_rill("detokenize " + d.string() + " < " + (d / "ids.json").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Licensed under the Apache License, 版本 2.0 🚀"), std::string::npos) << r.out;
  std::ofstream(d / "req.json") << R"({"messages": [{"role": "user", "content": "hi"}]})";
  r = run_rill("render " + d.string() + " < " + (d / "req.json").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const auto rendered = nlohmann::json::parse(r.out);
  EXPECT_EQ(rendered["prompt"].get<std::string>().rfind("<|im_assistant|>assistant<|im_middle|>"),
            rendered["prompt"].get<std::string>().size() -
                std::string("<|im_assistant|>assistant<|im_middle|>").size());
  EXPECT_EQ(rendered["prompt_token_ids"].back().get<int>(),
            1024 + 17);  // <|im_middle|>: control block id +17
  std::ofstream(d / "bad.json") << R"({"messages": "not a list"})";
  r = run_rill("render " + d.string() + " < " + (d / "bad.json").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("messages"), std::string::npos) << r.out;
  fs::remove_all(d);
}

TEST(BadInput, ClearErrorsAndExitCodes) {
  const std::string fixture = (testing::data_dir() / "kimi_linear_tiny_a").string();
  struct Case {
    std::string args, fragment;
  };
  const std::vector<Case> cases = {
      {"generate " + fixture + " --device cpu --prompt-ids 1,x,3",
       "element 1 (\"x\") is not a non-negative integer"},
      {"generate " + fixture + " --device cpu --prompt-ids 1,99999", "outside the vocabulary"},
      {"generate /nonexistent/model --device cpu --prompt-ids 1", "/nonexistent/model/config.json"},
      {"inspect /nonexistent/model", "/nonexistent/model/config.json"},
      {"logits " + fixture + " --device cpu --prompt-ids 1", "--out is required"},
      {"bench --load-format dummy --device cpu", "needs --preset"},
      {"frobnicate", "unknown command 'frobnicate'"},
  };
  for (const auto& c : cases) {
    const auto r = run_rill(c.args);
    EXPECT_NE(r.code, 0) << c.args;
    EXPECT_NE(r.out.find(c.fragment), std::string::npos) << c.args << "\n" << r.out;
  }
}

// --device cuda:N names the device; an index past the visible devices is a clear error on a GPU machine, and on
// one without a GPU (or a build without CUDA) the error says that instead. Spellings other than
// auto/cpu/cuda/cuda:N are refused by the flag parser.
TEST(Device, MissingGpuIndexIsNamed) {
  const std::string fixture = (testing::data_dir() / "kimi_linear_tiny_a").string();
  const auto r = run_rill("generate " + fixture + " --device cuda:7 --prompt-ids 1 --max-tokens 1");
  EXPECT_NE(r.code, 0);
  const bool named = r.out.find("device cuda:7 does not exist") != std::string::npos ||
                     r.out.find("no usable CUDA GPU") != std::string::npos ||
                     r.out.find("built without the CUDA backend") != std::string::npos;
  EXPECT_TRUE(named) << r.out;
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x", "cuda1"}) {
    const auto b = run_rill("generate " + fixture + " --device " + bad + " --prompt-ids 1");
    EXPECT_NE(b.code, 0) << bad;
    EXPECT_NE(b.out.find("expected auto, cpu, cuda or cuda:N"), std::string::npos) << bad << "\n" << b.out;
  }
}

}  // namespace
}  // namespace rill
