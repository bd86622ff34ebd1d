#include "bench/serve/serve_report.h"

#include <cmath>
#include <ctime>

#include <fmt/format.h>

namespace rill::bench::serve {
namespace {

using Json = nlohmann::ordered_json;

// vLLM's per-request TPOT: the decode time per token after the first (none for one-token outputs).
double tpot_s(const RequestRecord& r) {
  return r.completion_tokens > 1 ? (r.latency_s - r.ttft_s) / double(r.completion_tokens - 1) : 0.0;
}

std::string percentile_label(double p) {
  return p == std::floor(p) ? fmt::format("{}", int(p)) : fmt::format("{}", p);
}

Result<double> number(const Json& result, const std::string& key) {
  const auto v = result.find(key);
  if (v == result.end() || !v->is_number()) return invalid_argument("result JSON: no number \"{}\"", key);
  return v->get<double>();
}

struct Metric {
  const char* key;     // ttft, tpot, itl, e2el
  const char* name;    // TTFT, ...
  const char* header;  // vLLM's section title
  const LatencySummary ServeMetrics::*summary;
};
constexpr Metric kMetrics[] = {
    {"ttft", "TTFT", "Time to First Token", &ServeMetrics::ttft_ms},
    {"tpot", "TPOT", "Time per Output Token (excl. 1st token)", &ServeMetrics::tpot_ms},
    {"itl", "ITL", "Inter-token Latency", &ServeMetrics::itl_ms},
    {"e2el", "E2EL", "End-to-end Latency", &ServeMetrics::e2el_ms},
};

}  // namespace

ServeMetrics compute_metrics(const LoadResult& load, const RunConfig& config) {
  ServeMetrics m;
  m.duration_s = load.duration_s;
  m.max_in_flight = load.max_in_flight;
  std::vector<double> ttft, tpot, itl, e2el;
  int good = 0;
  for (const RequestRecord& r : load.records) {
    if (!r.ok) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.total_input += r.prompt_tokens;
    m.total_output += r.completion_tokens;
    ttft.push_back(r.ttft_s * 1e3);
    e2el.push_back(r.latency_s * 1e3);
    if (r.completion_tokens > 1) tpot.push_back(tpot_s(r) * 1e3);
    for (double g : r.itl_s) itl.push_back(g * 1e3);
    bool meets = true;
    for (const auto& [key, slo] : config.goodput_ms) {
      const double v = key == "ttft" ? r.ttft_s : key == "tpot" ? tpot_s(r) : r.latency_s;
      meets = meets && v * 1e3 <= slo;
    }
    good += meets;
  }
  const double d = m.duration_s > 0 ? m.duration_s : 1.0;
  m.request_throughput = m.completed / d;
  m.output_throughput = double(m.total_output) / d;
  m.total_token_throughput = double(m.total_input + m.total_output) / d;
  if (!config.goodput_ms.empty()) m.request_goodput = good / d;
  m.ttft_ms = summarize(ttft, config.percentiles);
  m.tpot_ms = summarize(tpot, config.percentiles);
  m.itl_ms = summarize(itl, config.percentiles);
  m.e2el_ms = summarize(e2el, config.percentiles);
  return m;
}

std::string format_report(const ServeMetrics& m, const RunConfig& config) {
  std::string out = fmt::format("{:=^50}\n", " Serving Benchmark Result ");
  auto row = [&](std::string_view label, const std::string& value) {
    out += fmt::format("{:<40} {:<10}\n", label, value);
  };
  auto num = [](double v) { return fmt::format("{:.2f}", v); };
  row("Successful requests:", std::to_string(m.completed));
  if (m.failed) row("Failed requests:", std::to_string(m.failed));
  if (config.max_concurrency > 0) row("Maximum request concurrency:", std::to_string(config.max_concurrency));
  if (!std::isinf(config.request_rate)) row("Request rate configured (RPS):", num(config.request_rate));
  row("Benchmark duration (s):", num(m.duration_s));
  row("Total input tokens:", std::to_string(m.total_input));
  row("Total generated tokens:", std::to_string(m.total_output));
  row("Request throughput (req/s):", num(m.request_throughput));
  if (m.request_goodput >= 0) row("Request goodput (req/s):", num(m.request_goodput));
  row("Output token throughput (tok/s):", num(m.output_throughput));
  row("Total Token throughput (tok/s):", num(m.total_token_throughput));
  for (const Metric& metric : kMetrics) {
    const LatencySummary& s = m.*metric.summary;
    out += fmt::format("{:-^50}\n", metric.header);
    row(fmt::format("Mean {} (ms):", metric.name), num(s.mean));
    row(fmt::format("Median {} (ms):", metric.name), num(s.median));
    for (size_t i = 0; i < config.percentiles.size(); ++i)
      row(fmt::format("P{} {} (ms):", percentile_label(config.percentiles[i]), metric.name),
          num(s.percentiles[i]));
  }
  if (const auto& sd = m.spec_decode) {  // vLLM's section, rates in percent
    out += fmt::format("{:-^50}\n", "Speculative Decoding");
    row("Acceptance rate (%):", sd->acceptance_rate ? num(*sd->acceptance_rate) : "n/a");
    row("Acceptance length:", sd->acceptance_length ? num(*sd->acceptance_length) : "n/a");
    row("Drafts:", std::to_string(sd->drafts));
    row("Draft tokens:", std::to_string(sd->draft_tokens));
    row("Accepted tokens:", std::to_string(sd->accepted_tokens));
    if (!sd->per_position.empty()) out += "Per-position acceptance (%):\n";
    for (size_t i = 0; i < sd->per_position.size(); ++i)
      row(fmt::format("  Position {}:", i), num(100 * sd->per_position[i]));
  }
  // (append, not std::string(50, '=') + "\n": GCC 12 at -O2 flags the temporary's concatenation with a false
  // -Warray-bounds once the string headers come from the precompiled header)
  out.append(50, '=');
  out += '\n';
  return out;
}

Json result_json(const ServeMetrics& m, const RunConfig& config, const LoadResult& load) {
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y%m%d-%H%M%S", std::localtime(&now));
  Json j;
  j["date"] = date;
  j["backend"] = config.endpoint == "/v1/chat/completions" ? "openai-chat" : "openai";
  j["endpoint"] = config.endpoint;
  j["model_id"] = config.model;
  j["tokenizer_id"] = config.tokenizer;
  j["dataset_name"] = config.dataset_name;
  j["num_prompts"] = config.num_prompts;
  j["request_rate"] = std::isinf(config.request_rate) ? Json("inf") : Json(config.request_rate);
  j["burstiness"] = config.burstiness;
  j["max_concurrency"] = config.max_concurrency > 0 ? Json(config.max_concurrency) : Json(nullptr);
  j["seed"] = config.seed;
  j["duration"] = m.duration_s;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["total_input_tokens"] = m.total_input;
  j["total_output_tokens"] = m.total_output;
  j["request_throughput"] = m.request_throughput;
  j["request_goodput"] = m.request_goodput >= 0 ? Json(m.request_goodput) : Json(nullptr);
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  j["max_in_flight"] = m.max_in_flight;
  Json input_lens = Json::array(), output_lens = Json::array(), ttfts = Json::array(), itls = Json::array(),
       e2els = Json::array(), starts = Json::array(), texts = Json::array(), errors = Json::array();
  for (const RequestRecord& r : load.records) {
    input_lens.push_back(r.ok ? r.prompt_tokens : 0);
    output_lens.push_back(r.ok ? r.completion_tokens : 0);
    ttfts.push_back(r.ok ? r.ttft_s : 0.0);
    itls.push_back(r.ok ? Json(r.itl_s) : Json::array());
    e2els.push_back(r.latency_s);
    starts.push_back(r.start_s);
    texts.push_back(r.text);
    errors.push_back(r.error);
  }
  j["input_lens"] = std::move(input_lens);
  j["output_lens"] = std::move(output_lens);
  j["ttfts"] = std::move(ttfts);
  j["itls"] = std::move(itls);
  j["e2els"] = std::move(e2els);
  j["start_times"] = std::move(starts);
  j["generated_texts"] = std::move(texts);
  j["errors"] = std::move(errors);
  for (const Metric& metric : kMetrics) {
    const LatencySummary& s = m.*metric.summary;
    j[fmt::format("mean_{}_ms", metric.key)] = s.mean;
    j[fmt::format("median_{}_ms", metric.key)] = s.median;
    j[fmt::format("std_{}_ms", metric.key)] = s.std;
    for (size_t i = 0; i < config.percentiles.size(); ++i)
      j[fmt::format("p{}_{}_ms", percentile_label(config.percentiles[i]), metric.key)] = s.percentiles[i];
  }
  if (const auto& sd = m.spec_decode) {  // vLLM's keys; null where the run had no drafts to divide by
    j["spec_decode_acceptance_rate"] = sd->acceptance_rate ? Json(*sd->acceptance_rate) : Json(nullptr);
    j["spec_decode_acceptance_length"] = sd->acceptance_length ? Json(*sd->acceptance_length) : Json(nullptr);
    j["spec_decode_num_drafts"] = sd->drafts;
    j["spec_decode_draft_tokens"] = sd->draft_tokens;
    j["spec_decode_accepted_tokens"] = sd->accepted_tokens;
    j["spec_decode_per_position_acceptance_rates"] = sd->per_position;
  }
  return j;
}

std::string percentile_key(double p) {
  return "p" + percentile_label(p);
}

Result<PlotPoint> plot_point(const Json& result, const std::string& tail) {
  if (!result.is_object()) return invalid_argument("result JSON: a run must be an object");
  PlotPoint p;
  RILL_ASSIGN_OR_RETURN(p.achieved_rate, number(result, "request_throughput"));
  RILL_ASSIGN_OR_RETURN(p.ttft_mean_ms, number(result, "mean_ttft_ms"));
  RILL_ASSIGN_OR_RETURN(p.ttft_tail_ms, number(result, tail + "_ttft_ms"));
  RILL_ASSIGN_OR_RETURN(p.tpot_mean_ms, number(result, "mean_tpot_ms"));
  RILL_ASSIGN_OR_RETURN(p.tpot_tail_ms, number(result, tail + "_tpot_ms"));
  return p;
}

}  // namespace rill::bench::serve
