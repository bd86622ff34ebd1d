// rill perplexity MODEL_DIR FILE [--context N --stride S]: token-level perplexity of a text file with a
// sliding window, as llama.cpp's llama-perplexity reports it (progress on stderr, the figure on stdout).
//
// Windowing (the same rule tools/demo_model/train.py records its held-out figure with): the file's N tokens
// are cut into windows that start at 0, S, 2S, ... and hold up to C tokens; the last window is the first one
// that reaches the end. Each window runs from an empty state, and scores the tokens it predicts that no
// earlier window scored: positions [max(start + 1, previous end), end). So with S == C the windows do not
// overlap and the first token of each is not scored (it has no context); with S < C every scored token after
// the first window has at least C - S tokens of context. No BOS is prepended. PPL = exp(mean negative
// log-likelihood).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/parallel_flags.h"
#include "model/config.h"
#include "runner/executor_session.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::cli {
namespace {

Result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return invalid_argument("FILE: cannot open {}", path);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return invalid_argument("FILE: cannot read {}", path);
  return s;
}

// A flat little-endian int32 array (what tools/demo_model writes as train.bin / heldout.bin).
Result<std::vector<int32_t>> read_id_file(const std::string& path, int64_t vocab) {
  RILL_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  if (bytes.size() % 4 != 0)
    return invalid_argument("FILE: {} holds {} bytes, not a whole number of int32 token ids (--ids)", path,
                            bytes.size());
  std::vector<int32_t> ids(bytes.size() / 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto* b = reinterpret_cast<const unsigned char*>(bytes.data() + 4 * i);
    ids[i] = int32_t(uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24);
    if (ids[i] < 0 || ids[i] >= vocab)
      return invalid_argument("FILE: token id {} at index {} of {} is outside the vocabulary [0, {})", ids[i],
                              i, path, vocab);
  }
  return ids;
}

struct Window {
  int64_t begin, end;  // tokens [begin, end) are fed
  int64_t score_from;  // targets [score_from, end) are scored
};

std::vector<Window> plan_windows(int64_t n, int64_t context, int64_t stride) {
  std::vector<Window> w;
  int64_t prev_end = 0;
  for (int64_t b = 0;; b += stride) {
    const int64_t e = std::min(b + context, n);
    const int64_t from = std::max(b + 1, prev_end);
    if (from < e) w.push_back({b, e, from});  // a tail window with nothing new to score is dropped
    prev_end = e;
    if (e == n) break;
  }
  return w;
}

}  // namespace

int run_perplexity(int argc, char** argv) {
  CLI::App app{
      "Token-level perplexity of a text file with a sliding window (llama-perplexity's convention): "
      "windows of --context tokens every --stride tokens, each token scored once, by the first window "
      "that predicts it; no BOS. Progress on stderr, the result on stdout."};
  std::string dir, file;
  int context = 512, stride = 0, chunk = 0, max_windows = 0;
  bool ids_file = false, json = false;
  DeviceOptions dev;
  app.add_option("MODEL_DIR", dir, "Hugging Face checkpoint directory")->required();
  app.add_option("FILE", file, "UTF-8 text, encoded with the checkpoint's tokenizer (specials as text)")
      ->required();
  app.add_option("--context,-c", context, "tokens per window")
      ->capture_default_str()
      ->check(CLI::Range(2, kMaxContextFlag));
  app.add_option("--stride", stride, "tokens between window starts (0 = --context: non-overlapping windows)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxContextFlag));
  app.add_option("--chunks", max_windows, "score only the first N windows (0 = all), as llama-perplexity's")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxContextFlag));
  app.add_option("--chunk", chunk, "prefill chunk size in tokens (0 = whole window)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxStepTokensFlag));
  app.add_flag("--ids", ids_file, "FILE holds little-endian int32 token ids instead of text");
  app.add_flag("--json", json, "print {perplexity, nll, tokens, windows, context, stride} as JSON");
  add_device_options(app, dev);
  app.add_option("--backend", dev.device, "the same as --device (cpu | cuda)")
      ->excludes(app.get_option("--device"));
  ParallelFlags parallel;
  if (int rc = parse_with_parallel_flags(app, argc, argv, "perplexity", dev, parallel); rc >= 0) return rc;
  if (stride == 0) stride = context;
  if (stride > context)
    return report_error(
        "perplexity",
        invalid_argument("--stride {} is larger than --context {}: tokens between windows would "
                         "never be scored",
                         stride, context));

  auto cfg = model::ModelConfig::load(dir);
  if (!cfg.ok()) return report_error("perplexity", cfg.status());
  if (cfg->max_position_embeddings > 0 && context > cfg->max_position_embeddings)
    return report_error("perplexity", invalid_argument("--context {} is larger than the model's {} positions "
                                                       "(model_max_length in {}/config.json)",
                                                       context, cfg->max_position_embeddings, dir));
  std::vector<int32_t> ids;
  if (ids_file) {
    auto r = read_id_file(file, cfg->vocab_size);
    if (!r.ok()) return report_error("perplexity", r.status());
    ids = std::move(r).value();
  } else {
    auto text = read_file(file);
    if (!text.ok()) return report_error("perplexity", text.status());
    auto tok = text::Tokenizer::load(dir);
    if (!tok.ok()) return report_error("perplexity", tok.status());
    ids = tok->encode(*text, /*allow_special=*/false);
  }
  if (ids.size() < 2)
    return report_error("perplexity", invalid_argument("FILE: {} holds {} token(s); at least 2 are needed",
                                                       file, ids.size()));

  std::vector<Window> windows = plan_windows(int64_t(ids.size()), context, stride);
  if (max_windows > 0 && int(windows.size()) > max_windows) windows.resize(max_windows);
  const int longest = int(windows.front().end - windows.front().begin);

  // Through an Executor, so -tp/-pp/-ep shard the model exactly as `rill serve` does. Long windows are fed in
  // pieces (as rill logits does) so the workspace's logit rows stay bounded.
  auto opened = open_local_executor(dir, dev, parallel, runner::scoring_runner_options(longest, chunk));
  if (!opened.ok()) return report_error("perplexity", opened.status());
  runner::Executor& ex = *opened->executor;
  auto session = runner::ExecutorSession::create(ex, longest);
  if (!session.ok()) return report_error("perplexity", session.status());
  const int64_t V = ex.model().config().vocab_size;

  std::fprintf(stderr, "perplexity: %zu tokens, %zu window(s) of up to %d tokens, stride %d, on %s\n",
               ids.size(), windows.size(), context, stride, opened->be->name().c_str());
  double nll = 0.0;
  int64_t scored = 0;
  for (size_t k = 0; k < windows.size(); ++k) {
    const Window& w = windows[k];
    const int n = int(w.end - w.begin);
    session->restart();
    // The last fed token predicts nothing inside the window, so it is not fed.
    const std::span<const int32_t> fed(ids.data() + w.begin, size_t(n - 1));
    auto logits = session->feed(fed, chunk);
    if (!logits.ok()) return report_error("perplexity", logits.status());
    for (int64_t t = w.score_from; t < w.end; ++t) {
      const float* row = logits->data() + (t - 1 - w.begin) * V;
      const double mx = *std::max_element(row, row + V);
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
      nll += mx + std::log(sum) - double(row[ids[size_t(t)]]);
      ++scored;
    }
    std::fprintf(stderr, "[%zu/%zu] %lld tokens scored, perplexity so far %.4f\n", k + 1, windows.size(),
                 static_cast<long long>(scored), std::exp(nll / double(scored)));
  }
  const double ppl = std::exp(nll / double(scored));
  if (json) {
    nlohmann::ordered_json j = {{"perplexity", ppl},
                                {"nll", nll / double(scored)},
                                {"tokens", scored},
                                {"windows", windows.size()},
                                {"context", context},
                                {"stride", stride},
                                {"device", opened->be->name()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("perplexity %.6f over %lld tokens (%zu windows, context %d, stride %d)\n", ppl,
                static_cast<long long>(scored), windows.size(), context, stride);
  }
  return 0;
}

}  // namespace rill::cli
