// Prefix reuse through the Engine (`rill bench --prefix-reuse`): time to first token of a long prompt
// computed cold, against the same length whose first tokens are cached (same prefix, different suffix), with
// prefix caching on. Runs on any backend; on the CPU with a tiny model and a short --prefill-tokens as a
// smoke test.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"

namespace rill::model {
class Model;
}

namespace rill::bench {

struct PrefixBenchOptions {
  int prompt_tokens = 8192;
  int cached_tokens = 7168;   // the shared prefix of the warm request
  int max_num_tokens = 8192;  // engine step budget
  int snapshot_interval = 256;
  int snapshot_budget_mib = 2048;
  int repeats = 3;  // timed cold/warm pairs (median), after one warm-up request
  // > 0: a host tier of this many GiB (--kv-offloading-size), and a third request per repeat: the warm one
  // again after every cached block went to the host tier (Engine::offload_prefix_cache).
  double host_tier_gib = 0;
  // Non-empty (with a host tier): a disk tier in this directory (--kv-offloading-dir), and a fourth request per
  // repeat: the warm one again after everything cached went to disk (Engine::persist_prefix_cache).
  std::string disk_dir;
};

struct PrefixBenchResult {
  // Medians: the cold prompt with caching off (one engine) and on (another engine on the same model: its
  // prefill chunks end at every snapshot position), then the warm prompt (caching on).
  double cold_off_ms = 0, cold_ms = 0, warm_ms = 0;
  // Host tier: the warm prompt brought back from the host (median), the bytes one such request brought back,
  // and the host -> device copy ceiling of the same bytes from pinned memory, measured in the same run.
  double host_ms = 0, host_bytes = 0, copy_ceiling_gbps = 0;
  int host_cached_tokens = 0;
  // Disk tier: the warm prompt read back from disk (median) and the bytes one such request read.
  double disk_ms = 0, disk_bytes = 0;
  int disk_cached_tokens = 0;
  int cached_tokens = 0;  // what the warm requests reported as cached (the last one)
  std::string memory_plan;
  double ratio() const { return warm_ms > 0 ? cold_ms / warm_ms : 0; }
  double ratio_vs_off() const { return warm_ms > 0 ? cold_off_ms / warm_ms : 0; }
  std::string describe(const PrefixBenchOptions& o) const;      // terminal lines
  std::string markdown_row(const PrefixBenchOptions& o) const;  // one markdown table line
};

// Takes the model (the engines own it in turn); returns after shutting the last engine down.
Result<PrefixBenchResult> bench_prefix_reuse(std::unique_ptr<model::Model> model,
                                             const PrefixBenchOptions& o);

}  // namespace rill::bench
