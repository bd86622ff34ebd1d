// Speculative decoding over one `rill bench serve` run: the server's spec_decode counters read from /metrics
// before and after it, and what vLLM's `bench serve` derives from their difference (acceptance rate, mean
// acceptance length, per-position acceptance). Reads rill's names (rill:spec_decode_*) and vLLM's (vllm:...).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "bench/serve/prometheus_text.h"

namespace rill::bench::serve {

// One scrape's cumulative counters, summed over label sets.
struct SpecDecodeCounters {
  double drafts = 0;           // verify steps of a sequence that carried drafts
  double draft_tokens = 0;     // draft tokens verified
  double accepted_tokens = 0;  // draft tokens accepted
  // accepted_per_position[i]: verify steps whose draft i (0-based) was accepted. From vLLM's
  // spec_decode_num_accepted_tokens_per_pos counter, or from rill's spec_decode_acceptance_length histogram
  // (draft i is accepted when a step emitted at least i + 2 tokens). Empty when the server has neither.
  std::vector<double> accepted_per_position;
};

// The counters of a scrape, or nullopt when the server exports no spec_decode counters (speculation off, or a
// server without them).
std::optional<SpecDecodeCounters> read_spec_decode_counters(const std::vector<PrometheusSample>& samples);

struct SpecDecodeStats {
  int64_t drafts = 0, draft_tokens = 0, accepted_tokens = 0;
  std::optional<double> acceptance_rate;    // percent: 100 * accepted / draft tokens (none without drafts)
  std::optional<double> acceptance_length;  // vLLM's mean acceptance length: 1 + accepted / drafts
  std::vector<double> per_position;         // fraction of drafts accepting position i (vLLM's, 0-1)
};

// What moved between two scrapes of one server. A counter that went down (the server restarted) counts from
// zero, as Prometheus' increase() does; `before` may be nullopt (the counters appeared during the run).
SpecDecodeStats spec_decode_delta(const std::optional<SpecDecodeCounters>& before,
                                  const SpecDecodeCounters& after);

}  // namespace rill::bench::serve
