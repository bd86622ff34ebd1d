#include "cli/serve_vllm_flags.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/log.h"
#include "model/config.h"

namespace rill::cli {
namespace {

void notice(const std::string& flag, const std::string& why) {
  RILL_LOG_INFO("notice: {}: {}", flag, why);
}

}  // namespace

void add_vllm_flags(CLI::App& app, server::ServerOptions& o, VllmFlags& f) {
  const char* group = "vLLM compatibility";
  add_parallel_flags(app, f);
  app.add_option(
         "--gpu-memory-utilization", f.gpu_memory_utilization,
         "fraction of the GPU's total memory the whole process may use (weights + workspace + "
         "caches), as vLLM; the caches get what the weights and the step workspace leave of it (instead of "
         "--kv-cache-fraction)")
      ->check(CLI::Range(0.01, 1.0))
      ->group(group);
  app.add_option("--kv-offloading-backend", f.kv_offloading_backend,
                 "where prefix-cache blocks evicted from the GPU go: native (rill's host tier; vLLM's name)")
      ->group(group);
  app.add_option("--kv-offloading-size", f.kv_offloading_size,
                 "GiB of host memory (pinned on CUDA) that keep MLA blocks and KDA snapshots evicted from the "
                 "GPU prefix cache; a returning conversation is copied back instead of recomputed (turns on "
                 "--enable-prefix-caching)")
      ->check(CLI::Range(0.0, 1048576.0))
      ->group(group);
  app.add_option("--kv-offloading-dir", f.kv_offloading_dir,
                 "a directory (created if missing) below the --kv-offloading-size host tier: MLA blocks and KDA "
                 "snapshots pushed out of host memory are written there in the background, and a restarted "
                 "server answers returning conversations from the files (tied to this model, config and cache "
                 "layout; others' are left alone). Needs --kv-offloading-size")
      ->group(group);
  app.add_option("--kv-offloading-disk-size", f.kv_offloading_disk_size,
                 "GiB the --kv-offloading-dir files may take (the least recently used go first); 0: no cap but "
                 "the disk's")
      ->check(CLI::Range(0.0, 1048576.0))
      ->group(group);
  app.add_option("--tool-call-parser", f.tool_call_parser,
                 "kimi_k2 (Kimi Linear and the tiny model) or kimi_k3: checked against the model; tool calls "
                 "are always parsed with the model family's parser")
      ->check(CLI::IsMember({"kimi_k2", "kimi_k3"}))
      ->group(group);
  app.add_option("--reasoning-parser", f.reasoning_parser,
                 "kimi, kimi_k2 or kimi_k3: checked against the model; reasoning is always split into "
                 "reasoning_content")
      ->check(CLI::IsMember({"kimi", "kimi_k2", "kimi_k3"}))
      ->group(group);
  app.add_flag("--enable-auto-tool-choice", f.enable_auto_tool_choice,
               "accepted: tool_choice auto is always on when a request declares tools")
      ->group(group);
  app.add_flag("--trust-remote-code", f.trust_remote_code, "accepted: rill runs no code from the checkpoint")
      ->group(group);
  app.add_option("--dtype", f.dtype, "auto or bfloat16 (the GPU computes in bfloat16, the CPU in float32)")
      ->capture_default_str()
      ->group(group);
  app.add_option("--seed", f.seed,
                 "requests without a seed get seed, seed + 1, ... in arrival order (reproducible runs)")
      ->check(CLI::Range(int64_t(0), INT64_MAX))
      ->group(group);
  app.add_option("--chat-template", o.chat_template_file,
                 "a Jinja chat template file used instead of the checkpoint's (K2 family)")
      ->check(CLI::ExistingFile)
      ->group(group);
  app.add_option(
         "--generation-config", o.generation_config,
         "auto: default temperature, top_p, top_k, repetition_penalty and max_tokens (max_new_tokens) "
         "from MODEL_DIR/generation_config.json; vllm: none; DIR: DIR/generation_config.json. "
         "Request fields override them")
      ->capture_default_str()
      ->group(group);
  app.add_flag("--enforce-eager", f.enforce_eager, "CUDA graphs off (on by default on CUDA)")->group(group);
  app.add_flag("--disable-log-requests", f.disable_log_requests,
               "no log line per finished or rejected request")
      ->group(group);
  app.add_flag("--enable-log-requests", f.enable_log_requests, "the request log (on by default)")
      ->group(group);
  app.add_option("--log-stats-interval", o.log_stats_interval_s,
                 "seconds between stats lines (throughput, running / waiting, cache use) while busy; 0: none")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0))
      ->group(group);
  app.add_flag("--disable-log-stats", f.disable_log_stats, "no stats lines (--log-stats-interval 0)")
      ->group(group);
}

Status apply_vllm_flags(const VllmFlags& f, const DeviceOptions& device, server::ServerOptions& o) {
  RILL_TRY(check_parallel_flags(f, device));
  if (f.dtype != "auto" && f.dtype != "bfloat16" && f.dtype != "bf16")
    return invalid_argument(
        "--dtype {}: rill computes in bfloat16 on the GPU (float32 on the CPU); use auto or "
        "bfloat16",
        f.dtype);
  // The parsers are the model family's; a name of the other family is a mistake worth stopping for. A
  // config that does not load is left for the server to report as it does without these flags.
  auto config = model::ModelConfig::load(o.model_dir);
  if (config.ok()) {
    const bool k3 = config->family == model::ModelFamily::KimiK3;
    const char* family = k3 ? "kimi_k3" : "kimi_linear (Kimi K2 family)";
    if (!f.tool_call_parser.empty() && (f.tool_call_parser == "kimi_k3") != k3)
      return invalid_argument("--tool-call-parser {}: the model is {}: use {}", f.tool_call_parser, family,
                              k3 ? "kimi_k3" : "kimi_k2");
    if ((f.reasoning_parser == "kimi_k3" && !k3) || (f.reasoning_parser == "kimi_k2" && k3))
      return invalid_argument("--reasoning-parser {}: the model is {}: use {}", f.reasoning_parser, family,
                              k3 ? "kimi_k3 (or kimi)" : "kimi (or kimi_k2)");
    if (k3 && !o.chat_template_file.empty())
      notice("--chat-template",
             "Kimi K3 prompts come from the native renderer (text/k3); the file is not used");
  }
  const bool cpu = device.device == "cpu" || (device.device == "auto" && !backend::cuda_backend_compiled());
  if (f.trust_remote_code) notice("--trust-remote-code", "rill runs no code from the checkpoint");
  if (f.enable_auto_tool_choice)
    notice("--enable-auto-tool-choice", "tool calls are parsed whenever a request declares tools");
  if (f.gpu_memory_utilization > 0 && cpu)
    notice("--gpu-memory-utilization",
           "the CPU backend sizes its caches from --num-kv-blocks and --max-model-len; not used");
  else if (f.gpu_memory_utilization > 0 && o.engine.num_kv_blocks > 0)
    notice("--gpu-memory-utilization", "--num-kv-blocks sets the cache size; not used");
  if (f.enforce_eager && cpu) notice("--enforce-eager", "the CPU backend has no CUDA graphs");
  if (f.dtype != "auto" && cpu) notice("--dtype " + f.dtype, "the CPU reference backend computes in float32");
  if (!f.kv_offloading_backend.empty() && f.kv_offloading_backend != "native")
    return invalid_argument("--kv-offloading-backend {}: rill has its own host tier only: use native",
                            f.kv_offloading_backend);
  if (!f.kv_offloading_backend.empty() && f.kv_offloading_size <= 0)
    return invalid_argument("--kv-offloading-backend native needs --kv-offloading-size GiB");
  if (f.kv_offloading_size > 0) {
    if (!o.engine.enable_prefix_caching)
      notice("--kv-offloading-size", "turns on --enable-prefix-caching (the host tier keeps its evicted blocks)");
    o.engine.enable_prefix_caching = true;
    o.engine.kv_offloading_gib = f.kv_offloading_size;
  }
  if (!f.kv_offloading_dir.empty() && f.kv_offloading_size <= 0)
    return invalid_argument("--kv-offloading-dir {}: the disk tier sits below the host tier: it needs "
                            "--kv-offloading-size GiB", f.kv_offloading_dir);
  if (f.kv_offloading_disk_size > 0 && f.kv_offloading_dir.empty())
    return invalid_argument("--kv-offloading-disk-size caps the --kv-offloading-dir files: give the directory");
  if (!f.kv_offloading_dir.empty()) {
    o.engine.kv_offloading_dir = f.kv_offloading_dir;
    o.engine.kv_offloading_disk_gib = f.kv_offloading_disk_size;
    // The checkpoint's config.json goes into the files' fingerprint (with what the runner sees of the
    // weights and caches), so another checkpoint or an edited config never reads them.
    std::ifstream config(std::filesystem::path(o.model_dir) / "config.json", std::ios::binary);
    std::ostringstream bytes;
    bytes << config.rdbuf();
    o.engine.model_identity = bytes.str();
  }
  o.engine.enforce_eager = f.enforce_eager;
  o.engine.gpu_memory_utilization = f.gpu_memory_utilization;
  if (f.seed >= 0) o.seed = uint64_t(f.seed);
  o.log_requests = !f.disable_log_requests;
  if (f.disable_log_stats) o.log_stats_interval_s = 0;
  return {};
}

std::vector<std::string> given_flags(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0 || !opt->nonpositional()) continue;
    const std::vector<std::string> lnames = opt->get_lnames();
    if (lnames.empty() || lnames.front() == "help") continue;
    std::string item = "--" + lnames.front();
    if (opt->get_expected_min() > 0) {
      for (const std::string& v : opt->results()) item += " " + (lnames.front() == "api-key" ? "***" : v);
    }
    out.push_back(std::move(item));
  }
  return out;
}

}  // namespace rill::cli
