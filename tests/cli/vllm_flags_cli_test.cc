// vLLM's command-line surface on the built binary (issue #34): every flag of `vllm serve --help=all`
// (tests/data/vllm/serve_flags.txt, transcribed from vLLM) works, is accepted with a notice or is refused with a
// reason — never "unknown"; usage errors exit 2 with a "did you mean"; `rill --version`; the parallel flags on
// the commands that run the model, with `rill generate`, `logits`, `perplexity` at -tp 2 (and -pp 2) against the
// single-rank run, and `rill bench -tp 2`'s sharded step rows.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/run_rill.h"
#include "io/safetensors.h"
#include "test_paths.h"

namespace rill {
namespace {

namespace fs = std::filesystem;
using testing::run_rill;

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct FlagLine {
  std::string flag, value;  // value "" for a switch
};

std::vector<FlagLine> vllm_serve_flags() {
  std::ifstream in(fs::path(rill::testing::source_dir()) / "tests/data/vllm/serve_flags.txt");
  std::vector<FlagLine> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.find(' ');
    out.push_back({line.substr(0, sp), sp == std::string::npos ? "" : line.substr(sp + 1)});
  }
  return out;
}

// A model directory that does not exist: parsing and the flag checks run, then the load fails (exit 1 or 2)
// in milliseconds, so the whole table takes a few seconds.
TEST(VllmServeFlags, NoneIsUnknown) {
  const auto flags = vllm_serve_flags();
  ASSERT_GT(flags.size(), 190u) << "the fixture has vLLM's flags";
  int accepted = 0, refused = 0;
  for (const FlagLine& f : flags) {
    SCOPED_TRACE(f.flag + " " + f.value);
    const std::string model = f.flag == "--model" ? "" : "/nonexistent/rill-model ";
    const std::string port = f.flag == "--port" ? "" : " --port 0";
    const auto r = run_rill("serve " + model + "--device cpu" + port + " " + f.flag +
                            (f.value.empty() ? "" : " " + quoted(f.value)));
    EXPECT_EQ(r.out.find("unknown flag"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("not expected"), std::string::npos) << r.out;
    ASSERT_NE(r.code, 0) << "the model directory does not exist: " << r.out;
    // Refused: bad input (2), the message names the flag. Accepted: the run went on to the missing model.
    const std::string flag_named = "rill serve: " + f.flag;
    if (r.out.find(flag_named) != std::string::npos) {
      EXPECT_EQ(r.code, 2) << r.out;
      ++refused;
    } else {
      EXPECT_NE(r.out.find("nonexistent"), std::string::npos) << "went on to load the model: " << r.out;
      ++accepted;
    }
  }
  std::printf("[ vllm flags ] %d accepted (working or with a notice), %d refused with a reason\n", accepted,
              refused);
}

TEST(VllmServeFlags, NoticesAndRefusalsSayWhy) {
  const std::string serve = "serve /nonexistent/rill-model --device cpu --port 0 ";
  auto r = run_rill(serve + "--block-size 16 --swap-space 4 --enable-chunked-prefill -O3 --kv-cache-dtype auto");
  for (const char* n : {"notice: --block-size: the MLA cache blocks are 64 tokens", "notice: --swap-space:",
                        "notice: --enable-chunked-prefill:", "notice: -O (compilation config):",
                        "notice: --kv-cache-dtype:"})
    EXPECT_NE(r.out.find(n), std::string::npos) << n << "\n" << r.out;
  for (const auto& [args, why] : std::vector<std::pair<std::string, std::string>>{
           {"--kv-cache-dtype fp8", "rill serve: --kv-cache-dtype fp8: the MLA latent cache is bfloat16"},
           {"--quantization awq", "rill runs the checkpoint's own formats"},
           {"-q gptq", "--quantization"},
           {"--ssl-keyfile k.pem", "rill serve: --ssl-keyfile k.pem: rill serves plain HTTP"},
           {"--enable-lora", "rill serve: --enable-lora: LoRA adapters are not supported"},
           {"--scheduling-policy priority", "use fcfs"},
           {"--tokenizer-mode", "--tokenizer-mode: expected a value"}}) {
    r = run_rill(serve + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(why), std::string::npos) << args << "\n" << r.out;
  }
}

// -q is --quantization on every command that loads a model (vLLM's short form; `serve` also rewrites it with
// its other vLLM flags): an unsupported method is refused by the same check.
TEST(Usage, QuantizationShortFormOnEveryModelCommand) {
  for (const char* cmd : {"serve", "generate", "chat", "logits", "perplexity", "bench"}) {
    const std::string args = std::string(cmd) + " /nonexistent/rill-model" +
                             (std::string(cmd) == "perplexity" ? " /nonexistent/text.txt" : "") + " -q gptq";
    const auto r = run_rill(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("rill runs the checkpoint's own formats"), std::string::npos) << args << "\n"
                                                                                       << r.out;
  }
}

TEST(Usage, ErrorsExit2WithTheClosestFlag) {
  auto r = run_rill("serve /nonexistent/rill-model --max-num-seq 4");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown flag --max-num-seq (did you mean --max-num-seqs?)"), std::string::npos) << r.out;
  r = run_rill("serve /nonexistent/rill-model --port notaport");
  EXPECT_EQ(r.code, 2) << r.out;
  r = run_rill("serve");  // MODEL_DIR missing
  EXPECT_EQ(r.code, 2) << r.out;
  r = run_rill("generate /nonexistent/rill-model --max-tokenz 3");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("did you mean --max-tokens?"), std::string::npos) << r.out;
  r = run_rill("serve --help");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--kv-cache-dtype (auto,bfloat16,bf16)"), std::string::npos) << "help lists vLLM's flags";
  r = run_rill("--version");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("rill 0.", 0), 0u) << r.out;
}

fs::path tiny_model() {
  static const fs::path d = [] {
    const fs::path p = fs::temp_directory_path() / ("rill_cli_vllm_tiny_" + std::to_string(getpid()));
    const auto r = run_rill("tiny-model " + p.string() + " --force");
    EXPECT_EQ(r.code, 0) << r.out;
    return p;
  }();
  return d;
}

std::string completion_ids(const std::string& out) {
  const size_t brace = out.rfind("{\"prompt_ids\"");
  if (brace == std::string::npos) return "(no JSON) " + out;
  auto j = nlohmann::json::parse(out.substr(brace), nullptr, false);
  return j.is_discarded() ? "(bad JSON) " + out : j["completion_ids"].dump();
}

// The sharded model (ranks as threads) against the single-rank run: greedy tokens equal.
TEST(ParallelFlags, GenerateTp2EqualsTp1Greedy) {
  const std::string base = "generate " + tiny_model().string() +
                           " --device cpu --prompt-ids 1,2,3,40,5 --max-tokens 8 --ignore-eos --json";
  const auto one = run_rill(base);
  ASSERT_EQ(one.code, 0) << one.out;
  for (const char* mapping : {"-tp 2", "--tensor-parallel-size=2 --enable-expert-parallel", "-tp 2 -pp 2"}) {
    const auto sharded = run_rill(base + " " + mapping);
    ASSERT_EQ(sharded.code, 0) << mapping << "\n" << sharded.out;
    EXPECT_EQ(completion_ids(sharded.out), completion_ids(one.out)) << mapping;
  }
}

TEST(ParallelFlags, SameChecksOnEveryCommand) {
  const std::string dir = tiny_model().string();
  for (const std::string& cmd : {"generate " + dir + " --prompt-ids 1", "logits " + dir + " --prompt-ids 1 --out x",
                                 "perplexity " + dir + " /dev/null", "bench " + dir, "chat " + dir,
                                 "serve " + dir + " --port 0"}) {
    auto r = run_rill(cmd + " --device cpu -tp 2 -ep 3");
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("--expert-parallel-size 3 must divide --tensor-parallel-size 2"), std::string::npos)
        << cmd << "\n" << r.out;
    r = run_rill(cmd + " --device cpu -dp 2");
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("--data-parallel-size 2: not built yet"), std::string::npos) << cmd << "\n" << r.out;
  }
}

std::vector<float> read_logits(const fs::path& file, int64_t* vocab) {
  auto f = io::SafetensorsFile::open(file);
  EXPECT_TRUE(f.ok()) << file;
  if (!f.ok()) return {};
  const io::TensorInfo* t = f->find("logits");
  EXPECT_NE(t, nullptr);
  if (t == nullptr) return {};
  *vocab = t->shape[1];
  const float* x = static_cast<const float*>(f->view(*t).data);
  return std::vector<float>(x, x + t->shape[0] * t->shape[1]);
}

// The sharded logits against the single-rank ones: the same function summed in another order (all-reduces), so
// close in relative L2 and with the same best token at every position (the random tiny model's margins are far
// above the CPU's fp32 reordering error).
TEST(ParallelFlags, LogitsShardedMatchesOneRank) {
  const fs::path dir = fs::temp_directory_path() / ("rill_tp_logits_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string base = "logits " + tiny_model().string() +
                           " --device cpu --prompt-ids 1,2,3,40,5,6,7,8,9,10,11,12,13,14,15,16,17 --out ";
  auto one = run_rill(base + (dir / "one.safetensors").string());
  ASSERT_EQ(one.code, 0) << one.out;
  int64_t V = 0;
  const std::vector<float> ref = read_logits(dir / "one.safetensors", &V);
  ASSERT_FALSE(ref.empty());
  for (const char* mapping : {"-tp 2", "-tp 2 -pp 2 --chunk 5", "-tp 2 --enable-expert-parallel"}) {
    const fs::path out = dir / "sharded.safetensors";
    const auto r = run_rill(base + out.string() + " " + mapping);
    ASSERT_EQ(r.code, 0) << mapping << "\n" << r.out;
    int64_t v2 = 0;
    const std::vector<float> got = read_logits(out, &v2);
    ASSERT_EQ(got.size(), ref.size()) << mapping;
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
      den += double(ref[i]) * ref[i];
    }
    EXPECT_LT(std::sqrt(num / den), 1e-4) << mapping;
    for (size_t row = 0; row * size_t(V) < ref.size(); ++row) {
      auto best = [&](const std::vector<float>& x) {
        return std::max_element(x.begin() + row * V, x.begin() + (row + 1) * V) - (x.begin() + row * V);
      };
      EXPECT_EQ(best(got), best(ref)) << mapping << " position " << row;
    }
  }
  fs::remove_all(dir);
}

TEST(ParallelFlags, PerplexityShardedMatchesOneRank) {
  const fs::path text = fs::temp_directory_path() / ("rill_tp_ppl_" + std::to_string(getpid()) + ".txt");
  {
    std::ofstream f(text);
    for (int i = 0; i < 40; ++i) f << "The quick brown fox " << i << " jumps over the lazy dog. ";
  }
  const std::string base = "perplexity " + tiny_model().string() + " " + text.string() +
                           " --device cpu --context 48 --stride 32 --json";
  auto figure = [](const std::string& out) {
    const size_t brace = out.rfind("{\"perplexity\"");
    if (brace == std::string::npos) return -1.0;
    return nlohmann::json::parse(out.substr(brace))["perplexity"].get<double>();
  };
  const auto one = run_rill(base);
  ASSERT_EQ(one.code, 0) << one.out;
  for (const char* mapping : {"-tp 2", "-tp 2 -pp 2"}) {
    const auto r = run_rill(base + " " + mapping);
    ASSERT_EQ(r.code, 0) << mapping << "\n" << r.out;
    EXPECT_NEAR(figure(r.out), figure(one.out), 1e-5 * figure(one.out)) << mapping;
    EXPECT_GT(figure(one.out), 1.0);
  }
  fs::remove(text);
}

// rill bench -tp 2: the steps through the sharded executor (section "sharded"); the single-model slices refuse.
TEST(ParallelFlags, BenchRunsShardedSteps) {
  const std::string base = "bench " + tiny_model().string() +
                           " --device cpu --prefill-tokens 64 --decode-context 64 --decode-batches 1 2 --repeats 1";
  auto r = run_rill(base + " -tp 2");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* row : {"sharded  prefill 1 x 64 tokens, tp 2 x pp 1, ep 1",
                          "sharded  decode batch 1 at 64 context, tp 2 x pp 1, ep 1",
                          "sharded  decode batch 2 at 64 context, tp 2 x pp 1, ep 1"})
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  r = run_rill(base + " -tp 2 --composed");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("run one unsplit model"), std::string::npos) << r.out;
}

// Without a mapping, inspect says how many GPUs of the given size a model needs when one cannot hold it (the
// count is the smallest whose plan fits: the plan's own numbers are tests/model/parallel_plan_test.cc's).
TEST(Inspect, SaysHowManyGpusWhenOneCannotHoldTheModel) {
  auto r = run_rill("inspect --preset kimi-k3");
  EXPECT_NE(r.out.find("gpus         does NOT fit one 140 GiB GPU x 0.90: needs "), std::string::npos) << r.out;
  const size_t at = r.out.find("needs ");
  ASSERT_NE(at, std::string::npos);
  const int n = std::atoi(r.out.c_str() + at + 6);
  // The mapping it names fits (exit 0) and one GPU fewer in the same shape does not.
  const size_t tp_at = r.out.find("(-tp ", at);
  ASSERT_NE(tp_at, std::string::npos);
  const std::string mapping = r.out.substr(tp_at + 1, r.out.find(';', tp_at) - tp_at - 1);
  const auto fits = run_rill("inspect --preset kimi-k3 " + mapping);
  EXPECT_EQ(fits.code, 0) << mapping << "\n" << fits.out;
  EXPECT_GT(n, 8) << "K3 needs more than one node of H200s";
  r = run_rill("inspect --preset kimi-linear-48b");
  EXPECT_NE(r.out.find("gpus         fits one 140 GiB GPU"), std::string::npos) << r.out;
  r = run_rill("inspect --preset kimi-linear-48b --gpu-memory-gib 40 --max-model-len 4096");
  EXPECT_EQ(r.out.find("gpus         fits"), std::string::npos) << "--gpu-memory-gib asks for the plan: " << r.out;
}

}  // namespace
}  // namespace rill
