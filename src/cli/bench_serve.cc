// rill bench serve: the serving benchmark, with `vllm bench serve`'s flags, table and result keys, against a
// running OpenAI-compatible server (rill serve or any other). Streamed requests arrive as a Poisson process
// (--request-rate, --burstiness) under --max-concurrency; tokens are the server's usage counts. Speculative
// decoding (acceptance rate and length) comes from the server's /metrics counters, read before and after each
// run.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/chrono.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "bench/serve/arrivals.h"
#include "bench/serve/dataset.h"
#include "bench/serve/latency_plot.h"
#include "bench/serve/load_generator.h"
#include "bench/serve/prometheus_text.h"
#include "bench/serve/serve_report.h"
#include "bench/serve/spec_decode_stats.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::cli {

namespace {

namespace bs = bench::serve;
using Json = nlohmann::ordered_json;

struct ServeFlags {
  std::string url = "http://127.0.0.1:8000", host, model, tokenizer, endpoint = "/v1/completions";
  int port = 0;
  std::string dataset_name = "random", dataset_path;
  bs::RandomDatasetOptions random;
  int custom_output_len = 256, num_prompts = 1000, max_concurrency = 0;
  std::vector<std::string> request_rates{"inf"}, goodput;
  std::string metric_percentiles = "99";
  double burstiness = 1.0, temperature = 0.0;
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::string result_file, plot, plot_from;
  // vLLM's spellings: --backend picks the endpoint; --save-result [--result-dir D] [--result-filename F] is
  // --result-file; --percentile-metrics names the metrics whose percentiles are reported.
  std::string backend, result_dir, result_filename, percentile_metrics = "ttft,tpot,itl";
  bool save_result = false;
  int sharegpt_output_len = 0;
  // vLLM's --dataset-name hf, from a downloaded dataset: --hf-subset (a subfolder), --hf-split, --hf-output-len.
  std::string hf_subset, hf_split;
  int hf_output_len = 256;
};

Result<std::vector<double>> parse_rates(const std::vector<std::string>& items) {
  std::vector<double> rates;
  for (const std::string& s : items) {
    if (s == "inf") {
      rates.push_back(INFINITY);
      continue;
    }
    char* end = nullptr;
    const double r = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !(r > 0) || std::isinf(r))
      return invalid_argument("--request-rate: '{}' is neither a number > 0 nor inf", s);
    rates.push_back(r);
  }
  return rates;
}

Result<std::vector<double>> parse_percentiles(const std::string& list) {
  std::vector<double> out;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t comma = std::min(list.find(',', begin), list.size());
    const std::string item = list.substr(begin, comma - begin);
    char* end = nullptr;
    const double p = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(p > 0 && p <= 100))
      return invalid_argument("--metric-percentiles: '{}' is not a percentile in (0, 100]", item);
    out.push_back(p);
    begin = comma + 1;
  }
  return out;
}

Result<std::map<std::string, double>> parse_goodput(const std::vector<std::string>& items) {
  std::map<std::string, double> out;
  for (const std::string& s : items) {
    const size_t colon = s.find(':');
    const std::string key = s.substr(0, colon);
    char* end = nullptr;
    const double ms = colon == std::string::npos ? 0 : std::strtod(s.c_str() + colon + 1, &end);
    if (key != "ttft" && key != "tpot" && key != "e2el")
      return invalid_argument("--goodput: '{}': the key must be ttft, tpot or e2el (KEY:MILLISECONDS)", s);
    if (colon == std::string::npos || *end != '\0' || !(ms > 0))
      return invalid_argument("--goodput: '{}': the value must be a number of milliseconds > 0", s);
    out[key] = ms;
  }
  return out;
}

// The served model's name and its card's `root` (rill's: the checkpoint directory it serves).
Result<std::pair<std::string, std::string>> served_model(const bs::ServerUrl& url,
                                                         const std::string& api_key) {
  RILL_ASSIGN_OR_RETURN(bs::HttpReply r, bs::http_get(url, "/v1/models", api_key, 60));
  if (r.status != 200)
    return unavailable("--url {}: GET /v1/models answered {}: {}", url.str(), r.status,
                       r.body.substr(0, 300));
  const Json j = Json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].value("id", Json()).is_string())
    return unavailable("--url {}: GET /v1/models: no model in {}", url.str(), r.body.substr(0, 300));
  const Json& card = j["data"][0];
  return std::pair{card["id"].get<std::string>(),
                   card.value("root", Json("")).is_string() ? card.value("root", "") : ""};
}

Result<std::vector<bs::BenchPrompt>> load_prompts(const ServeFlags& f, const std::string& root,
                                                  std::string* tokenizer_dir) {
  std::vector<bs::BenchPrompt> prompts;
  std::optional<text::Tokenizer> tokenizer;
  auto need_tokenizer = [&]() -> Status {
    if (tokenizer) return Status::ok_status();
    *tokenizer_dir = f.tokenizer.empty() ? root : f.tokenizer;
    if (!f.tokenizer.empty() && !std::filesystem::is_directory(f.tokenizer))
      return invalid_argument("--tokenizer {}: not a directory", f.tokenizer);
    if (tokenizer_dir->empty() || !std::filesystem::is_directory(*tokenizer_dir))
      return invalid_argument(
          "--tokenizer: random prompts (and token-id prompts sent to the chat route) are ids of the served "
          "model's vocabulary: give --tokenizer MODEL_DIR (the server's model card names '{}', which is not "
          "a "
          "directory here)",
          *tokenizer_dir);
    auto t = text::Tokenizer::load(*tokenizer_dir);
    if (!t.ok()) return t.status().with_context("--tokenizer " + *tokenizer_dir);
    tokenizer = std::move(t).value();
    return Status::ok_status();
  };
  if (f.dataset_name == "random") {
    RILL_TRY(need_tokenizer());
    RILL_ASSIGN_OR_RETURN(prompts, bs::random_dataset(f.random, f.num_prompts, tokenizer->n_ranks(), f.seed));
  } else if (f.dataset_name == "sharegpt") {
    if (f.dataset_path.empty())
      return invalid_argument("--dataset-name sharegpt needs --dataset-path FILE (vLLM's ShareGPT JSON)");
    RILL_TRY(need_tokenizer());  // output lengths are the replies' token counts, as vLLM's
    auto count = [&](const std::string& text) { return int(tokenizer->encode(text, false).size()); };
    RILL_ASSIGN_OR_RETURN(prompts, bs::sharegpt_dataset(f.dataset_path, f.num_prompts, count, f.sharegpt_output_len));
  } else if (f.dataset_name == "hf") {
    if (f.dataset_path.empty())
      return invalid_argument("--dataset-name hf needs --dataset-path DIR: a dataset downloaded with "
                              "`huggingface-cli download --repo-type dataset NAME --local-dir DIR` (rill does not "
                              "fetch from the Hub)");
    const std::filesystem::path where =
        f.hf_subset.empty() ? std::filesystem::path(f.dataset_path) : std::filesystem::path(f.dataset_path) / f.hf_subset;
    RILL_ASSIGN_OR_RETURN(prompts, bs::hf_dataset(where, f.num_prompts, f.hf_output_len, f.hf_split));
  } else {
    if (f.dataset_path.empty())
      return invalid_argument("--dataset-name {} needs --dataset-path FILE", f.dataset_name);
    RILL_ASSIGN_OR_RETURN(prompts, bs::file_dataset(f.dataset_path, f.num_prompts, f.custom_output_len));
  }
  if (f.endpoint == "/v1/chat/completions") {  // a chat message is text: ids are decoded with the tokenizer
    for (bs::BenchPrompt& p : prompts) {
      if (p.prompt.is_string()) continue;
      RILL_TRY(need_tokenizer());
      RILL_ASSIGN_OR_RETURN(std::string text, tokenizer->decode(p.prompt.get<std::vector<int32_t>>()));
      p.prompt = std::move(text);
    }
  }
  return prompts;
}

std::string request_body(const ServeFlags& f, const std::string& model, const bs::BenchPrompt& p) {
  Json b{{"model", model}};
  if (f.endpoint == "/v1/chat/completions") {
    b["messages"] = Json::array({Json{{"role", "user"}, {"content", p.prompt}}});
    b["max_completion_tokens"] = p.output_len;
  } else {
    b["prompt"] = p.prompt;
    b["max_tokens"] = p.output_len;
  }
  b["temperature"] = f.temperature;
  b["stream"] = true;
  b["stream_options"] = Json{{"include_usage", true}};
  if (f.ignore_eos) b["ignore_eos"] = true;  // vLLM's extension (rill serve and vLLM honour it)
  return b.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// --plot: one point per run of `results` (this invocation's, or a saved --result-file's with --plot-from).
int draw_plot(const ServeFlags& f, const Json& results, const std::vector<double>& percentiles,
              const std::string& model) {
  const std::string tail = bs::percentile_key(percentiles.back());
  std::vector<bs::PlotPoint> points;
  for (const Json& run : results.is_array() ? results : Json::array({results})) {
    auto p = bs::plot_point(run, tail);
    if (!p.ok())
      return report_error("bench serve", p.status().with_context(
                                             f.plot_from.empty() ? "--plot" : "--plot-from " + f.plot_from));
    points.push_back(*p);
  }
  const Json& first = results.is_array() ? results[0] : results;
  const std::string title =
      fmt::format("rill bench serve: {} via {}, {} prompts per point", first.value("model_id", model),
                  first.value("endpoint", f.endpoint), first.value("num_prompts", f.num_prompts));
  auto drawn = bs::plot_latency(points, f.plot, tail, title);
  if (!drawn.ok()) return report_error("bench serve", drawn.status());
  if (!*drawn)
    std::fprintf(stderr, "rill bench serve: gnuplot is not installed: --plot %s skipped\n", f.plot.c_str());
  return 0;
}

// The server's spec_decode counters now: nullopt when it has none or no readable /metrics (not every
// OpenAI-compatible server serves one; vLLM's bench then leaves the section out too).
std::optional<bs::SpecDecodeCounters> scrape_spec_decode(const bs::ServerUrl& url,
                                                         const std::string& api_key) {
  auto reply = bs::http_get(url, "/metrics", api_key, 30);
  if (!reply.ok() || reply->status != 200) return std::nullopt;
  auto samples = bs::parse_prometheus_text(reply->body);
  if (!samples.ok()) {
    std::fprintf(stderr, "rill bench serve: speculative decoding not reported: %s\n",
                 samples.status().message().c_str());
    return std::nullopt;
  }
  return bs::read_spec_decode_counters(*samples);
}

std::string rate_text(double r) {
  return std::isinf(r) ? "inf" : fmt::format("{}", r);
}

}  // namespace

int run_bench_serve(int argc, char** argv) {
  CLI::App app{
      "Serving benchmark against a running OpenAI-compatible server, with vllm bench serve's flags and "
      "report: streamed requests at --request-rate (Poisson arrivals) under --max-concurrency; TTFT, "
      "TPOT, ITL, end-to-end latency, throughput and goodput, tokens from the server's usage."};
  ServeFlags f;
  app.add_option("--url,--base-url", f.url, "server URL (http://HOST:PORT, optionally a path prefix)")
      ->capture_default_str();
  app.add_option("--host", f.host, "server host (with --port: instead of --url)");
  app.add_option("--port", f.port, "server port (with --host)")->check(CLI::Range(1, 65535));
  app.add_option("--model", f.model,
                 "model name in the requests (default: the server's first /v1/models entry)");
  app.add_option("--tokenizer", f.tokenizer,
                 "checkpoint directory whose tokenizer the random prompts are drawn from (default: the model "
                 "card's root, which rill serve sets to its MODEL_DIR)");
  app.add_option("--endpoint", f.endpoint, "API route")
      ->check(CLI::IsMember({"/v1/completions", "/v1/chat/completions"}))
      ->capture_default_str();
  app.add_option("--dataset-name", f.dataset_name,
                 "random (token ids, exact input lengths), sharegpt (vLLM's ShareGPT JSON in --dataset-path: "
                 "first turn the prompt, the reply's token count max_tokens) or file (--dataset-path, one "
                 "prompt a line; 'custom' is vLLM's name) or hf (a Hugging Face dataset downloaded to "
                 "--dataset-path: its .jsonl/.json files)")
      ->check(CLI::IsMember({"random", "sharegpt", "file", "custom", "hf"}))
      ->capture_default_str();
  app.add_option(
      "--dataset-path", f.dataset_path,
      "prompts, one per line: {\"prompt\": \"text\" or [ids], \"output_len\": N}, a JSON string, an id "
      "array, or plain text");
  app.add_option("--random-input-len", f.random.input_len, "random dataset: prompt tokens")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxContextFlag));
  app.add_option("--random-output-len", f.random.output_len, "random dataset: max_tokens")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxContextFlag));
  app.add_option("--random-range-ratio", f.random.range_ratio,
                 "random dataset: lengths uniform in [len * (1 - r), len * (1 + r)]")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.999999));
  app.add_option("--custom-output-len", f.custom_output_len,
                 "file dataset: max_tokens of prompts without their own output_len")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxContextFlag));
  app.add_option("--hf-subset", f.hf_subset, "hf dataset: the subset (a subfolder of --dataset-path)");
  app.add_option("--hf-split", f.hf_split, "hf dataset: only the files whose name holds this split (default: all)");
  app.add_option("--hf-output-len", f.hf_output_len, "hf dataset: max_tokens of records without their own")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxContextFlag));
  app.add_option("--num-prompts", f.num_prompts, "requests per run")
      ->capture_default_str()
      ->check(CLI::Range(1, 10'000'000));
  app.add_option(
         "--request-rate", f.request_rates,
         "requests per second (Poisson arrivals), or inf (all at once); a comma list runs each in turn")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--burstiness", f.burstiness,
                 "shape of the gamma inter-arrival times: 1 = Poisson, < 1 burstier, > 1 more regular")
      ->capture_default_str();
  app.add_option("--max-concurrency", f.max_concurrency, "most requests open at once (default: no limit)")
      ->check(CLI::Range(1, 1'000'000));
  app.add_option("--seed", f.seed, "seed of the random prompts and the arrival times")->capture_default_str();
  app.add_option("--temperature", f.temperature, "sampling temperature of every request (0: greedy)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 2.0));
  app.add_flag("--ignore-eos", f.ignore_eos,
               "send ignore_eos: true (vLLM's extension), so outputs run to max_tokens");
  app.add_option(
      "--goodput", f.goodput,
      "service-level objectives KEY:MS (ttft, tpot, e2el): goodput counts the requests meeting all");
  app.add_option("--metric-percentiles", f.metric_percentiles, "comma list of percentiles to report")
      ->capture_default_str();
  app.add_option("--result-file", f.result_file,
                 "write vLLM's result JSON here (an array of them with several --request-rate values)");
  app.add_option(
      "--plot", f.plot,
      "write a PNG of mean and tail TTFT and TPOT against the achieved request rate, one point per "
      "--request-rate value (needs gnuplot)");
  app.add_option(
      "--plot-from", f.plot_from,
      "with --plot: draw it from a saved --result-file instead of running (no server is contacted)");
  app.add_option("--backend", f.backend,
                 "vLLM's: openai or vllm (/v1/completions), openai-chat (/v1/chat/completions)")
      ->check(CLI::IsMember({"openai", "vllm", "openai-chat"}));
  app.add_flag("--save-result", f.save_result,
               "vLLM's: write the result JSON to --result-dir/--result-filename (default "
               "rill-{rate}qps-{model}-{date}.json; --result-file names it directly)");
  app.add_option("--result-dir", f.result_dir, "with --save-result: the directory");
  app.add_option("--result-filename", f.result_filename, "with --save-result: the file name");
  app.add_option("--percentile-metrics", f.percentile_metrics,
                 "vLLM's: the metrics whose percentiles are reported (ttft, tpot, itl, e2el); rill reports the "
                 "--metric-percentiles of all four, so any of them is accepted")
      ->capture_default_str()
      ->check([](const std::string& v) -> std::string {
        for (size_t i = 0; i <= v.size();) {
          size_t j = v.find(',', i);
          if (j == std::string::npos) j = v.size();
          const std::string m = v.substr(i, j - i);
          if (m != "ttft" && m != "tpot" && m != "itl" && m != "e2el")
            return "\"" + m + "\": expected a comma list of ttft, tpot, itl, e2el";
          i = j + 1;
        }
        return "";
      });
  app.add_option("--sharegpt-output-len", f.sharegpt_output_len,
                 "sharegpt dataset: max_tokens of every request instead of the reply's length")
      ->check(CLI::Range(1, kMaxContextFlag));
  if (int rc = parse_args(app, argc, argv); rc >= 0) return rc;
  if (f.backend == "openai-chat") f.endpoint = "/v1/chat/completions";
  if ((f.backend == "openai" || f.backend == "vllm") && !app.count("--endpoint")) f.endpoint = "/v1/completions";
  if (f.save_result && f.result_file.empty()) {
    const std::string name = !f.result_filename.empty()
                                 ? f.result_filename
                                 : fmt::format("rill-{}qps-{:%Y%m%d-%H%M%S}.json", fmt::join(f.request_rates, "_"),
                                               fmt::localtime(std::time(nullptr)));
    f.result_file = (std::filesystem::path(f.result_dir.empty() ? "." : f.result_dir) / name).string();
  } else if (!f.save_result && (!f.result_dir.empty() || !f.result_filename.empty())) {
    return report_error("bench serve", invalid_argument("--result-dir and --result-filename go with --save-result"));
  }
  if (f.dataset_name == "custom") f.dataset_name = "file";
  if (!f.dataset_path.empty() && !app.count("--dataset-name")) f.dataset_name = "file";
  if (!f.dataset_path.empty() && f.dataset_name == "random")
    return report_error("bench serve",
                        invalid_argument("--dataset-path is read only with --dataset-name file, sharegpt or hf"));
  if (!f.host.empty() || f.port) {
    if (f.host.empty() || !f.port)
      return report_error("bench serve", invalid_argument("--host and --port go together (or give --url)"));
    f.url = fmt::format("http://{}:{}", f.host, f.port);
  }
  auto rates = parse_rates(f.request_rates);
  if (!rates.ok()) return report_error("bench serve", rates.status());
  auto goodput = parse_goodput(f.goodput);
  if (!goodput.ok()) return report_error("bench serve", goodput.status());
  auto percentiles = parse_percentiles(f.metric_percentiles);
  if (!percentiles.ok()) return report_error("bench serve", percentiles.status());
  if (!(f.burstiness > 0) || std::isinf(f.burstiness))
    return report_error("bench serve", invalid_argument("--burstiness: must be a finite number > 0"));
  if (!f.plot_from.empty()) {
    if (f.plot.empty())
      return report_error("bench serve", invalid_argument("--plot-from needs --plot OUT.png"));
    std::ifstream in(f.plot_from);
    const Json saved = Json::parse(in, nullptr, false);
    if (!in || saved.is_discarded() || (saved.is_array() && saved.empty()))
      return report_error("bench serve", invalid_argument("--plot-from {}: not a result JSON", f.plot_from));
    return draw_plot(f, saved, *percentiles, "");
  }
  auto url = bs::parse_server_url(f.url);
  if (!url.ok()) return report_error("bench serve", url.status());
  const char* key_env = std::getenv("OPENAI_API_KEY");  // as vLLM's benchmark: the server's --api-key
  const std::string api_key = key_env ? key_env : "";

  auto served = served_model(*url, api_key);
  if (!served.ok()) return report_error("bench serve", served.status());
  const std::string model = f.model.empty() ? served->first : f.model;
  std::string tokenizer_dir;
  auto prompts = load_prompts(f, served->second, &tokenizer_dir);
  if (!prompts.ok()) return report_error("bench serve", prompts.status());

  bs::LoadPlan plan{*url, f.endpoint, api_key, {}, {}, f.max_concurrency};
  for (const bs::BenchPrompt& p : *prompts) plan.bodies.push_back(request_body(f, model, p));
  bs::RunConfig config;
  config.model = model;
  config.tokenizer = tokenizer_dir;
  config.endpoint = f.endpoint;
  config.dataset_name = f.dataset_name;
  config.num_prompts = f.num_prompts;
  config.burstiness = f.burstiness;
  config.max_concurrency = f.max_concurrency;
  config.seed = f.seed;
  config.percentiles = *percentiles;
  config.goodput_ms = *goodput;
  Json results = Json::array();
  int exit_code = 0;
  for (double rate : *rates) {
    config.request_rate = rate;
    // The arrivals draw from their own stream, so the prompts of a seed are the same at every rate.
    auto arrivals = bs::arrival_times(f.num_prompts, rate, f.burstiness, f.seed ^ 0x9e3779b97f4a7c15ull);
    if (!arrivals.ok()) return report_error("bench serve", arrivals.status());
    plan.arrivals = std::move(arrivals).value();
    std::fprintf(stderr, "rill bench serve: %d requests to %s%s at request rate %s%s ...\n", f.num_prompts,
                 url->str().c_str(), f.endpoint.c_str(), rate_text(rate).c_str(),
                 f.max_concurrency ? fmt::format(", max concurrency {}", f.max_concurrency).c_str() : "");
    const auto spec_before = scrape_spec_decode(*url, api_key);
    auto load = bs::run_load(plan);
    if (!load.ok()) return report_error("bench serve", load.status());
    bs::ServeMetrics m = bs::compute_metrics(*load, config);
    if (const auto spec_after = scrape_spec_decode(*url, api_key))
      m.spec_decode = bs::spec_decode_delta(spec_before, *spec_after);
    std::printf("%s", bs::format_report(m, config).c_str());
    std::fflush(stdout);
    if (m.failed) {
      std::set<std::string> shown;
      for (const bs::RequestRecord& r : load->records)
        if (!r.ok && shown.size() < 3 && shown.insert(r.error).second)
          std::fprintf(stderr, "rill bench serve: a request failed: %s\n", r.error.c_str());
    }
    if (m.completed == 0) exit_code = 1;
    results.push_back(bs::result_json(m, config, *load));
  }
  if (!f.result_file.empty()) {
    std::ofstream out(f.result_file);
    out << (results.size() == 1 ? results[0] : results).dump(2, ' ', false, Json::error_handler_t::replace)
        << "\n";
    if (!out)
      return report_error("bench serve", internal_error("--result-file {}: cannot write it", f.result_file));
  }
  if (!f.plot.empty()) {
    if (int rc = draw_plot(f, results, *percentiles, model); rc != 0) return rc;
  }
  return exit_code;
}

}  // namespace rill::cli
