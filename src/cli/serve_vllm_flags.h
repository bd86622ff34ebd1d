// vLLM's `vllm serve` flags that rill serve accepts so a vLLM command line starts it unchanged: the parallel
// sizes (1 is what this build runs; other values are refused), --gpu-memory-utilization (into
// EngineOptions; runner/memory_plan.cc sizes the caches from it), the Kimi tool / reasoning parser names
// (checked against the model family), --dtype, --seed, --chat-template, --generation-config, the logging
// switches, and flags that have nothing to do in rill (--trust-remote-code, ...), which get a one-line
// notice.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "backend/backend.h"
#include "cli/common.h"
#include "cli/parallel_flags.h"
#include "core/status.h"
#include "server/server.h"

namespace rill::cli {

// The parallel flags are every model-running command's (parallel_flags.h); the rest is serve's.
struct VllmFlags : ParallelFlags {
  double gpu_memory_utilization = 0;  // 0: not given
  std::string tool_call_parser, reasoning_parser;
  bool enable_auto_tool_choice = false, trust_remote_code = false;
  std::string dtype = "auto";
  int64_t seed = -1;  // -1: not given
  bool disable_log_requests = false, enable_log_requests = false, disable_log_stats = false;
  bool enforce_eager = false;
  // Prefix caching's host tier (issue #38): vLLM's --kv-offloading-backend (only "native") and
  // --kv-offloading-size (GiB of host memory).
  std::string kv_offloading_backend;
  double kv_offloading_size = 0;
  // Its disk tier below (rill's; named after them): a directory for items pushed out of the host tier, and
  // a cap on what it keeps there (GiB; 0: none but the disk's).
  std::string kv_offloading_dir;
  double kv_offloading_disk_size = 0;
};

void add_vllm_flags(CLI::App& app, server::ServerOptions& o, VllmFlags& flags);

// After parsing: refuses what this build cannot do (pipeline or data parallelism, a parser of the other model
// family, a dtype other than auto / bfloat16), logs a notice for flags with nothing to do here, and writes
// the rest into `o`.
Status apply_vllm_flags(const VllmFlags& flags, const DeviceOptions& device, server::ServerOptions& o);

// The flags given on the command line, as "--name value" (secrets masked), for the start-up summary.
std::vector<std::string> given_flags(const CLI::App& app);

}  // namespace rill::cli
