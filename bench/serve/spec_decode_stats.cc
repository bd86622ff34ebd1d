#include "bench/serve/spec_decode_stats.h"

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

namespace rill::bench::serve {
namespace {

constexpr const char* kPrefixes[] = {"rill:", "vllm:"};

// Per-position acceptance from vLLM's counter: one sample per position label.
std::vector<double> per_position_counter(const std::vector<PrometheusSample>& samples,
                                         const std::string& name) {
  std::map<int, double> by_position;
  for (const PrometheusSample& s : samples) {
    const auto pos = s.labels.find("position");
    if (s.name != name || pos == s.labels.end()) continue;
    char* end = nullptr;
    const long p = std::strtol(pos->second.c_str(), &end, 10);
    if (pos->second.empty() || *end != '\0' || p < 0 || p > 1024) continue;
    by_position[int(p)] += s.value;
  }
  std::vector<double> out;
  for (const auto& [p, v] : by_position) {
    out.resize(size_t(p) + 1, 0.0);
    out[size_t(p)] = v;
  }
  return out;
}

// Per-position acceptance from rill's acceptance-length histogram: buckets le = 1 ... k + 1 (cumulative
// counts of steps that emitted at most that many tokens) and _count. Draft i is accepted by the steps that
// emitted at least i + 2 tokens: _count - bucket(le = i + 1).
std::vector<double> per_position_histogram(const std::vector<PrometheusSample>& samples,
                                           const std::string& name) {
  std::map<int, double> cumulative;  // le -> count, summed over label sets
  for (const PrometheusSample& s : samples) {
    const auto le = s.labels.find("le");
    if (s.name != name + "_bucket" || le == s.labels.end() || le->second == "+Inf") continue;
    char* end = nullptr;
    const double bound = std::strtod(le->second.c_str(), &end);
    if (*end != '\0' || bound < 1 || bound != std::floor(bound) || bound > 1025) continue;
    cumulative[int(bound)] += s.value;
  }
  const std::optional<double> count = sum_samples(samples, name + "_count");
  std::vector<double> out;
  if (!count || cumulative.empty() || cumulative.rbegin()->first != int(cumulative.size()))
    return out;  // gaps
  for (int n = 1; n < int(cumulative.size()); ++n) out.push_back(*count - cumulative[n]);
  return out;
}

}  // namespace

std::optional<SpecDecodeCounters> read_spec_decode_counters(const std::vector<PrometheusSample>& samples) {
  for (const std::string prefix : kPrefixes) {
    const auto drafts = sum_samples(samples, prefix + "spec_decode_num_drafts_total");
    const auto draft_tokens = sum_samples(samples, prefix + "spec_decode_num_draft_tokens_total");
    const auto accepted = sum_samples(samples, prefix + "spec_decode_num_accepted_tokens_total");
    if (!drafts || !draft_tokens || !accepted) continue;
    SpecDecodeCounters c{*drafts, *draft_tokens, *accepted, {}};
    c.accepted_per_position =
        per_position_counter(samples, prefix + "spec_decode_num_accepted_tokens_per_pos_total");
    if (c.accepted_per_position.empty())
      c.accepted_per_position = per_position_histogram(samples, prefix + "spec_decode_acceptance_length");
    return c;
  }
  return std::nullopt;
}

SpecDecodeStats spec_decode_delta(const std::optional<SpecDecodeCounters>& before,
                                  const SpecDecodeCounters& after) {
  auto increase = [](double b, double a) { return a >= b ? a - b : a; };
  const SpecDecodeCounters zero;
  const SpecDecodeCounters& b = before ? *before : zero;
  SpecDecodeStats s;
  s.drafts = int64_t(std::llround(increase(b.drafts, after.drafts)));
  s.draft_tokens = int64_t(std::llround(increase(b.draft_tokens, after.draft_tokens)));
  s.accepted_tokens = int64_t(std::llround(increase(b.accepted_tokens, after.accepted_tokens)));
  if (s.draft_tokens > 0) s.acceptance_rate = 100.0 * double(s.accepted_tokens) / double(s.draft_tokens);
  if (s.drafts > 0) {
    s.acceptance_length = 1.0 + double(s.accepted_tokens) / double(s.drafts);
    for (size_t i = 0; i < after.accepted_per_position.size(); ++i) {
      const double was = i < b.accepted_per_position.size() ? b.accepted_per_position[i] : 0.0;
      s.per_position.push_back(increase(was, after.accepted_per_position[i]) / double(s.drafts));
    }
  }
  return s;
}

}  // namespace rill::bench::serve
