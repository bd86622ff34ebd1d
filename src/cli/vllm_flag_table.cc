#include "cli/vllm_flag_table.h"

#include <algorithm>
#include <cstring>

namespace rill::cli {
namespace {

using A = VllmFlagArg;

// Reasons shared by several flags.
constexpr const char* kLocalDir = "MODEL_DIR is a local checkpoint directory: nothing is downloaded; not used";
constexpr const char* kTextOnly = "the Kimi Linear and K3 text models take no images, audio or video; not used";
constexpr const char* kNoLora = "LoRA adapters are not supported: serve a checkpoint with the adapter merged";
constexpr const char* kNoTls =
    "rill serves plain HTTP: terminate TLS in a reverse proxy (nginx, caddy, envoy) in front of it";
constexpr const char* kNoPython = "rill runs no Python: plug-ins, callables and classes cannot be loaded";
constexpr const char* kNoDp = "one model replica per process (data parallelism is not built yet); not used";
constexpr const char* kGraphs =
    "rill captures its own CUDA graphs for decode batch buckets (--enforce-eager turns them off); not used";
constexpr const char* kNoEplb = "experts stay where -ep places them (no load balancing); not used";
constexpr const char* kOneEngine = "one engine thread schedules every step; not used";

const std::vector<VllmOnlyFlag> kTable = {
    // Model and checkpoint.
    {"--tokenizer", A::Value, "the tokenizer is MODEL_DIR's tiktoken.model and tokenizer_config.json; not used", nullptr, nullptr},
    {"--tokenizer-mode", A::Value, "rill's tiktoken BPE is the only tokenizer; not used", nullptr, nullptr},
    {"--revision", A::Value, kLocalDir, nullptr, nullptr},
    {"--code-revision", A::Value, kLocalDir, nullptr, nullptr},
    {"--tokenizer-revision", A::Value, kLocalDir, nullptr, nullptr},
    {"--download-dir", A::Value, kLocalDir, nullptr, nullptr},
    {"--hf-token", A::Value, kLocalDir, nullptr, nullptr},
    {"--hf-config-path", A::Value, "the config is MODEL_DIR/config.json; not used", nullptr, nullptr},
    {"--config-format", A::Value, "config.json is read in its Hugging Face form", "auto,hf",
     "only Hugging Face config.json checkpoints are read (--config-format auto or hf)"},
    {"--hf-overrides", A::Value, nullptr, nullptr,
     "rill does not patch the config at start-up: edit MODEL_DIR/config.json (rill inspect checks it)"},
    {"--skip-tokenizer-init", A::Switch, nullptr, nullptr,
     "the server needs the tokenizer (chat rendering, tool and reasoning parsing)"},
    {"--model-impl", A::Value, "rill has one implementation of each model; not used", nullptr, nullptr},
    {"--task", A::Value, "rill generates text", "auto,generate",
     "rill serves text generation only (no embeddings, scoring or classification)"},
    {"--runner", A::Value, "rill generates text", "auto,generate",
     "rill serves text generation only (no pooling runner)"},
    {"--convert", A::Value, "rill generates text", "auto,none",
     "rill serves text generation only (no conversion to a pooling model)"},
    {"--pooler-config", A::Value, nullptr, nullptr, "rill serves text generation only (no pooling)"},
    {"--override-pooler-config", A::Value, nullptr, nullptr, "rill serves text generation only (no pooling)"},
    {"--max-logprobs", A::Value, "top_logprobs and completions logprobs are capped at 20 (OpenAI's maximum)",
     nullptr, nullptr},
    {"--logprobs-mode", A::Value, "logprobs are the model's raw log-softmax", "raw_logprobs",
     "logprobs are the raw log-softmax of the logits (--logprobs-mode raw_logprobs)"},
    {"--rope-scaling", A::Value, nullptr, nullptr,
     "position scaling comes from config.json (Kimi Linear's MLA has no RoPE): edit the config"},
    {"--rope-theta", A::Value, nullptr, nullptr,
     "position scaling comes from config.json (Kimi Linear's MLA has no RoPE): edit the config"},
    {"--override-attention-dtype", A::Value, nullptr, nullptr,
     "attention computes in bfloat16 on the GPU (float32 on the CPU) with float32 softmax"},
    {"--disable-sliding-window", A::Switch, "the models have no sliding-window attention; not used", nullptr, nullptr},
    {"--disable-cascade-attn", A::Switch, "rill has no cascade attention; not used", nullptr, nullptr},
    {"--enable-prompt-embeds", A::Switch, nullptr, nullptr, "prompts are text or token ids (no embeddings)"},
    {"--served-model-name-prefix", A::Value, nullptr, nullptr, "use --served-model-name"},
    {"--override-generation-config", A::Value, nullptr, nullptr,
     "defaults come from generation_config.json (--generation-config DIR points at another one)"},
    {"--logits-processors", A::Value, nullptr, nullptr, kNoPython},
    {"--logits-processor-pattern", A::Value, nullptr, nullptr, kNoPython},
    {"--io-processor-plugin", A::Value, nullptr, nullptr, kNoPython},
    {"--max-parallel-loading-workers", A::Value, "weights load through mmap in one pass; not used", nullptr, nullptr},
    {"--safetensors-load-strategy", A::Value, "weights load through mmap in one pass; not used", nullptr, nullptr},
    {"--pt-load-map-location", A::Value, "rill reads safetensors only; not used", nullptr, nullptr},
    {"--use-tqdm-on-load", A::Switch, "load progress is drawn on a terminal and logged otherwise", nullptr, nullptr},
    {"--model-loader-extra-config", A::Value, nullptr, nullptr, "rill's loader takes no extra configuration"},
    {"--ignore-patterns", A::Value, kLocalDir, nullptr, nullptr},
    {"--allowed-local-media-path", A::Value, kTextOnly, nullptr, nullptr},
    {"--allowed-media-domains", A::Value, kTextOnly, nullptr, nullptr},
    {"--limit-mm-per-prompt", A::Value, kTextOnly, nullptr, nullptr},
    {"--media-io-kwargs", A::Value, kTextOnly, nullptr, nullptr},
    {"--mm-processor-kwargs", A::Value, kTextOnly, nullptr, nullptr},
    {"--mm-processor-cache-gb", A::Value, kTextOnly, nullptr, nullptr},
    {"--mm-processor-cache-type", A::Value, kTextOnly, nullptr, nullptr},
    {"--mm-shm-cache-max-object-size-mb", A::Value, kTextOnly, nullptr, nullptr},
    {"--mm-encoder-tp-mode", A::Value, kTextOnly, nullptr, nullptr},
    {"--interleave-mm-strings", A::Switch, kTextOnly, nullptr, nullptr},
    {"--skip-mm-profiling", A::Switch, kTextOnly, nullptr, nullptr},
    {"--video-pruning-rate", A::Value, kTextOnly, nullptr, nullptr},
    {"--disable-mm-preprocessor-cache", A::Switch, kTextOnly, nullptr, nullptr},
    {"--language-model-only", A::Switch, "rill runs the text model only", nullptr, nullptr},
    // Quantization and cache formats (--quantization itself is an option: serve_vllm_flags.cc).
    {"--kv-cache-dtype", A::Value, "the MLA latent cache is bfloat16 (the KDA state float32)", "auto,bfloat16,bf16",
     "the MLA latent cache is bfloat16 (the KDA state float32): an fp8 cache is not built yet (use auto)"},
    {"--calculate-kv-scales", A::Switch, "the cache is bfloat16: no scales; not used", nullptr, nullptr},
    {"--mamba-cache-dtype", A::Value, "the KDA state is float32", "auto,float32",
     "the KDA recurrent state is kept in float32 (the spec's precision); use auto"},
    {"--mamba-ssm-cache-dtype", A::Value, "the KDA state is float32", "auto,float32",
     "the KDA recurrent state is kept in float32 (the spec's precision); use auto"},
    {"--quantization-param-path", A::Value, nullptr, nullptr, "no KV-cache scales to load: the cache is bfloat16"},
    // Cache and scheduler.
    {"--block-size", A::Value, "the MLA cache blocks are 64 tokens (the KDA state is one slot per sequence); not used",
     nullptr, nullptr},
    {"--swap-space", A::Value, "preempted requests are recomputed, never swapped to the CPU; not used", nullptr,
     nullptr},
    {"--cpu-offload-gb", A::Value, "nothing is offloaded", "0",
     "weights stay on the GPUs (no CPU offload): split the model with -tp / -pp instead"},
    {"--kv-cache-memory-bytes", A::Value, nullptr, nullptr,
     "size the caches with --gpu-memory-utilization, --kv-cache-fraction or --num-kv-blocks (64-token blocks)"},
    {"--num-gpu-blocks-override", A::Value, nullptr, nullptr,
     "rill's blocks are 64 tokens: give --num-kv-blocks (64-token MLA blocks) instead"},
    {"--prefix-caching-hash-algo", A::Value, "prefix blocks are keyed by rill's own hash chain; not used", nullptr,
     nullptr},
    {"--no-enable-prefix-caching", A::Switch, "prefix caching is off unless --enable-prefix-caching", nullptr,
     nullptr},
    {"--enable-chunked-prefill", A::Switch, "prefill is always chunked to fill --max-num-tokens per step", nullptr,
     nullptr},
    {"--no-enable-chunked-prefill", A::Switch, nullptr, nullptr,
     "prefill is always chunked (steps mix prefill chunks and decode tokens); it cannot be turned off"},
    {"--max-num-partial-prefills", A::Value, "prefill chunks of several requests share a step already; not used",
     nullptr, nullptr},
    {"--max-long-partial-prefills", A::Value, "prefill chunks of several requests share a step already; not used",
     nullptr, nullptr},
    {"--long-prefill-token-threshold", A::Value, "prefill chunks fill what decode leaves of --max-num-tokens; not used",
     nullptr, nullptr},
    {"--scheduling-policy", A::Value, "requests are served first come, first served", "fcfs",
     "requests are served first come, first served (no priorities): use fcfs"},
    {"--scheduler-cls", A::Value, nullptr, nullptr, kNoPython},
    {"--preemption-mode", A::Value, "preempted requests are recomputed", "recompute",
     "preempted requests are recomputed (no swapping): use recompute"},
    {"--async-scheduling", A::Switch, kOneEngine, nullptr, nullptr},
    {"--no-async-scheduling", A::Switch, kOneEngine, nullptr, nullptr},
    {"--num-scheduler-steps", A::Value, kOneEngine, nullptr, nullptr},
    {"--multi-step-stream-outputs", A::Switch, kOneEngine, nullptr, nullptr},
    {"--num-lookahead-slots", A::Value, "speculative slots follow --speculative-config; not used", nullptr, nullptr},
    {"--stream-interval", A::Value, "streams send every token as it is decoded; not used", nullptr, nullptr},
    {"--kv-sharing-fast-prefill", A::Switch, "not used by these models", nullptr, nullptr},
    {"--disable-chunked-mm-input", A::Switch, kTextOnly, nullptr, nullptr},
    {"--speculative-model", A::Value, nullptr, nullptr,
     "give --speculative-config '{\"method\": \"draft_model\", \"model\": DIR, \"num_speculative_tokens\": K}'"},
    {"--num-speculative-tokens", A::Value, nullptr, nullptr,
     "give --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": K}'"},
    // Compilation and graphs.
    {"--compilation-config", A::Value, kGraphs, nullptr, nullptr},
    {"--cuda-graph-sizes", A::Value, kGraphs, nullptr, nullptr},
    {"--max-seq-len-to-capture", A::Value, kGraphs, nullptr, nullptr},
    {"--max-cudagraph-capture-size", A::Value, kGraphs, nullptr, nullptr},
    {"--cudagraph-capture-sizes", A::Value, kGraphs, nullptr, nullptr},
    {"--kernel-config", A::Value, "rill's kernels are compiled in; not used", nullptr, nullptr},
    {"--attention-backend", A::Value, "rill has its own KDA and MLA kernels; not used", nullptr, nullptr},
    // Parallelism and devices.
    {"--distributed-executor-backend", A::Value,
     "ranks are threads of this process (or mpirun / srun processes); not used", nullptr, nullptr},
    {"--disable-custom-all-reduce", A::Switch, "all-reduces go through NCCL; not used", nullptr, nullptr},
    {"--worker-cls", A::Value, nullptr, nullptr, kNoPython},
    {"--worker-extension-cls", A::Value, nullptr, nullptr, kNoPython},
    {"--ray-workers-use-nsight", A::Switch, "no Ray here; not used", nullptr, nullptr},
    {"--data-parallel-size-local", A::Value, kNoDp, nullptr, nullptr},
    {"--data-parallel-rank", A::Value, kNoDp, nullptr, nullptr},
    {"--data-parallel-start-rank", A::Value, kNoDp, nullptr, nullptr},
    {"--data-parallel-address", A::Value, kNoDp, nullptr, nullptr},
    {"--data-parallel-rpc-port", A::Value, kNoDp, nullptr, nullptr},
    {"--data-parallel-backend", A::Value, kNoDp, nullptr, nullptr},
    {"--data-parallel-hybrid-lb", A::Switch, kNoDp, nullptr, nullptr},
    {"--data-parallel-external-lb", A::Switch, kNoDp, nullptr, nullptr},
    {"--decode-context-parallel-size", A::Value, "no context parallelism", "1",
     "decode context parallelism is not built (only 1)"},
    {"--enable-eplb", A::Switch, kNoEplb, nullptr, nullptr},
    {"--eplb-config", A::Value, kNoEplb, nullptr, nullptr},
    {"--num-redundant-experts", A::Value, kNoEplb, nullptr, nullptr},
    {"--expert-placement-strategy", A::Value, "experts are split in contiguous ranges over the -ep ranks", "linear",
     "experts are split in contiguous ranges over the -ep ranks (linear)"},
    {"--all2all-backend", A::Value, "rill picks its own expert exchange (docs/MULTI_GPU.md); not used", nullptr,
     nullptr},
    {"--enable-dbo", A::Switch, kOneEngine, nullptr, nullptr},
    {"--dbo-decode-token-threshold", A::Value, kOneEngine, nullptr, nullptr},
    {"--dbo-prefill-token-threshold", A::Value, kOneEngine, nullptr, nullptr},
    {"--enable-multimodal-encoder-data-parallel", A::Switch, kTextOnly, nullptr, nullptr},
    {"--disable-hybrid-kv-cache-manager", A::Switch,
     "rill's cache manager is built for the hybrid KDA + MLA models; not used", nullptr, nullptr},
    {"--headless", A::Switch, nullptr, nullptr,
     "to run ranks without a server use mpirun / srun: every process but the first runs headless"},
    {"--api-server-count", A::Value, "the HTTP server is one process with --http-threads handlers", "1",
     "one HTTP server per process (raise --http-threads for more concurrent requests)"},
    // The HTTP front end.
    {"--uds", A::Value, nullptr, nullptr, "rill listens on TCP (--host / --port) only"},
    {"--ssl-keyfile", A::Value, nullptr, nullptr, kNoTls},
    {"--ssl-certfile", A::Value, nullptr, nullptr, kNoTls},
    {"--ssl-ca-certs", A::Value, nullptr, nullptr, kNoTls},
    {"--ssl-cert-reqs", A::Value, nullptr, nullptr, kNoTls},
    {"--enable-ssl-refresh", A::Switch, nullptr, nullptr, kNoTls},
    {"--root-path", A::Value, "routes are served at /v1/... whatever a proxy's prefix; not used", nullptr, nullptr},
    {"--middleware", A::Value, nullptr, nullptr, kNoPython},
    {"--allow-credentials", A::Switch, nullptr, nullptr,
     "CORS answers never allow credentials (use --api-key with an Authorization header)"},
    {"--disable-fastapi-docs", A::Switch, "rill serves no /docs or /openapi.json pages", nullptr, nullptr},
    {"--disable-uvicorn-access-log", A::Switch, nullptr, nullptr,
     "use --disable-log-requests (the request log is rill's access log)"},
    {"--disable-frontend-multiprocessing", A::Switch, "the HTTP server and the engine share one process", nullptr,
     nullptr},
    {"--enable-request-id-headers", A::Switch, "every response carries X-Request-Id (the client's or a new one)",
     nullptr, nullptr},
    {"--response-role", A::Value, "replies have role assistant", "assistant",
     "replies have role assistant (the chat templates' role)"},
    {"--return-tokens-as-token-ids", A::Switch, nullptr, nullptr,
     "logprobs name tokens by their text (token-id strings are not built yet)"},
    {"--chat-template-content-format", A::Value, "both string and OpenAI list content are accepted", nullptr,
     nullptr},
    {"--trust-request-chat-template", A::Switch, nullptr, nullptr,
     "requests cannot replace the chat template (give --chat-template FILE at start-up)"},
    {"--default-chat-template-kwargs", A::Value, nullptr, nullptr,
     "give chat_template_kwargs per request (e.g. {\"thinking\": false})"},
    {"--exclude-tools-when-tool-choice-none", A::Switch, nullptr, nullptr,
     "declared tools stay in the prompt with tool_choice none (the model's template decides)"},
    {"--tool-parser-plugin", A::Value, nullptr, nullptr, kNoPython},
    {"--reasoning-parser-plugin", A::Value, nullptr, nullptr, kNoPython},
    {"--tool-server", A::Value, nullptr, nullptr, "built-in tool servers (MCP) are not supported"},
    {"--enable-reasoning", A::Switch, "reasoning is always split into reasoning_content", nullptr, nullptr},
    {"--guided-decoding-backend", A::Value, "rill's own grammar engine constrains output (src/text/constraint)",
     nullptr, nullptr},
    {"--structured-outputs-config", A::Value, "rill's own grammar engine constrains output (src/text/constraint)",
     nullptr, nullptr},
    {"--enable-prompt-tokens-details", A::Switch,
     "usage.prompt_tokens_details.cached_tokens is always reported", nullptr, nullptr},
    {"--enable-force-include-usage", A::Switch, nullptr, nullptr,
     "streams carry usage when the request asks (stream_options.include_usage)"},
    {"--enable-server-load-tracking", A::Switch, "/metrics has the running and waiting request counts", nullptr,
     nullptr},
    {"--enable-tokenizer-info-endpoint", A::Switch, nullptr, nullptr,
     "no /tokenizer_info route (/tokenize and /detokenize are served)"},
    {"--h11-max-incomplete-event-size", A::Value, "use --max-header-bytes", nullptr, nullptr},
    {"--h11-max-header-count", A::Value, "use --max-header-bytes", nullptr, nullptr},
    {"--log-config-file", A::Value, nullptr, nullptr,
     "logs go to stderr in rill's format (--log-level sets the level)"},
    {"--log-error-stack", A::Switch, "errors are logged with their cause", nullptr, nullptr},
    {"--enable-log-outputs", A::Switch, "request log lines carry ids, counts and timings, never text", nullptr,
     nullptr},
    {"--max-log-len", A::Value, "request log lines carry ids, counts and timings, never text", nullptr, nullptr},
    {"--aggregate-engine-logging", A::Switch, "one engine: its stats lines are the aggregate", nullptr, nullptr},
    {"--show-hidden-metrics-for-version", A::Value, "/metrics shows every metric rill has", nullptr, nullptr},
    {"--otlp-traces-endpoint", A::Value, nullptr, nullptr, "OpenTelemetry tracing is not built"},
    {"--collect-detailed-traces", A::Value, nullptr, nullptr, "OpenTelemetry tracing is not built"},
    {"--enable-sleep-mode", A::Switch, nullptr, nullptr, "sleep mode (freeing the GPU while idle) is not built"},
    {"--kv-transfer-config", A::Value, nullptr, nullptr, "disaggregated prefill (KV transfer) is not built"},
    {"--kv-events-config", A::Value, nullptr, nullptr, "KV cache events are not built"},
    {"--additional-config", A::Value, nullptr, nullptr, "rill takes no platform-specific configuration"},
    {"--config", A::Value, nullptr, nullptr, "give the flags on the command line (YAML config files are not read)"},
    // LoRA and prompt adapters.
    {"--enable-lora", A::Switch, nullptr, nullptr, kNoLora},
    {"--lora-modules", A::Value, nullptr, nullptr, kNoLora},
    {"--max-loras", A::Value, nullptr, nullptr, kNoLora},
    {"--max-lora-rank", A::Value, nullptr, nullptr, kNoLora},
    {"--max-cpu-loras", A::Value, nullptr, nullptr, kNoLora},
    {"--lora-dtype", A::Value, nullptr, nullptr, kNoLora},
    {"--lora-extra-vocab-size", A::Value, nullptr, nullptr, kNoLora},
    {"--fully-sharded-loras", A::Switch, nullptr, nullptr, kNoLora},
    {"--enable-lora-bias", A::Switch, nullptr, nullptr, kNoLora},
    {"--long-lora-scaling-factors", A::Value, nullptr, nullptr, kNoLora},
    {"--default-mm-loras", A::Value, nullptr, nullptr, kNoLora},
    {"--prompt-adapters", A::Value, nullptr, nullptr, kNoLora},
    {"--enable-prompt-adapter", A::Switch, nullptr, nullptr, kNoLora},
};

bool contains_value(const char* list, const std::string& v) {
  const std::string_view l = list;
  size_t i = 0;
  while (i <= l.size()) {
    size_t j = l.find(',', i);
    if (j == std::string_view::npos) j = l.size();
    if (l.substr(i, j - i) == v) return true;
    i = j + 1;
  }
  return false;
}

bool app_has(const CLI::App& app, const std::string& flag) {
  for (const CLI::Option* opt : app.get_options())
    for (const std::string& l : opt->get_lnames())
      if ("--" + l == flag) return true;
  return false;
}

const VllmOnlyFlag* find_flag(const std::string& name) {
  for (const VllmOnlyFlag& f : kTable)
    if (name == f.name) return &f;
  return nullptr;
}

// uvicorn's levels onto rill's (trace is debug, critical is error).
std::string rill_log_level(const std::string& uvicorn) {
  if (uvicorn == "trace") return "debug";
  if (uvicorn == "critical") return "error";
  return uvicorn;
}

}  // namespace

const std::vector<VllmOnlyFlag>& vllm_only_flags() {
  return kTable;
}

Result<std::vector<std::string>> take_vllm_only_flags(std::vector<std::string>& args, const CLI::App& app) {
  std::vector<std::string> notices, out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (i == 0 || !a.starts_with("-")) {
      out.push_back(a);
      continue;
    }
    // vLLM's compilation level: -O3, -O 3, -O.level=3, -O.cudagraph_mode=...
    if (a.starts_with("-O") && !a.starts_with("--")) {
      if (a == "-O" && i + 1 < args.size()) ++i;
      notices.push_back(std::string("-O (compilation config): ") + kGraphs);
      continue;
    }
    if (a == "-q" || a.starts_with("-q=")) {
      out.push_back("--quantization" + a.substr(2));
      continue;
    }
    // vLLM's other short forms (-tp -pp -dp -ep are expanded by the caller).
    static const std::pair<const char*, const char*> kShort[] = {
        {"-dcp", "--decode-context-parallel-size"}, {"-dpn", "--data-parallel-rank"},
        {"-dpr", "--data-parallel-start-rank"},     {"-dpl", "--data-parallel-size-local"},
        {"-dpa", "--data-parallel-address"},        {"-dpp", "--data-parallel-rpc-port"},
        {"-dpb", "--data-parallel-backend"}};
    for (const auto& [from, to] : kShort)
      if (a == from || a.starts_with(std::string(from) + "=")) args[i] = to + a.substr(std::strlen(from));
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq);
    const bool inline_value = eq != std::string::npos;
    auto take_value = [&]() -> Result<std::string> {
      if (inline_value) return a.substr(eq + 1);
      if (i + 1 >= args.size()) return invalid_argument("{}: expected a value", name);
      return args[++i];
    };
    if (name == "--model" && !app_has(app, name)) {
      RILL_ASSIGN_OR_RETURN(std::string dir, take_value());
      out.push_back(dir);  // vLLM's deprecated spelling of the positional model
      continue;
    }
    if (name == "--uvicorn-log-level") {
      RILL_ASSIGN_OR_RETURN(std::string level, take_value());
      out.push_back("--log-level");
      out.push_back(rill_log_level(level));
      continue;
    }
    const VllmOnlyFlag* f = find_flag(name);
    // argparse's BooleanOptionalAction: --no-X turns the switch --X off.
    if (f == nullptr && name.starts_with("--no-")) {
      const VllmOnlyFlag* on = find_flag("--" + name.substr(5));
      if (on != nullptr && on->arg == A::Switch) f = on;
    }
    if (f == nullptr || app_has(app, name)) {
      out.push_back(a);
      continue;
    }
    std::string value;
    if (f->arg == A::Value) {
      RILL_ASSIGN_OR_RETURN(value, take_value());
    }
    const bool accepted =
        f->notice != nullptr && (f->accepted_values == nullptr || contains_value(f->accepted_values, value));
    if (!accepted) {
      const std::string given = value.empty() ? name : name + " " + value;
      return invalid_argument("{}: {}", given, f->refusal != nullptr ? f->refusal : "not supported by rill");
    }
    notices.push_back(name + ": " + f->notice);
  }
  args = std::move(out);
  return notices;
}

std::vector<std::string> vllm_flag_names() {
  std::vector<std::string> names = {"--model", "--uvicorn-log-level", "--max-num-seqs", "--max-num-batched-tokens",
                                    "--max-seq-len", "--free-gpu-memory-fraction",
                                    "--kv-cache-free-gpu-memory-fraction"};
  for (const VllmOnlyFlag& f : kTable) names.push_back(f.name);
  return names;
}

std::string vllm_only_flags_help() {
  std::string accepted, refused;
  for (const VllmOnlyFlag& f : kTable) {
    std::string& list = f.notice != nullptr ? accepted : refused;
    list += list.empty() ? "" : ", ";
    list += f.name;
    if (f.notice != nullptr && f.accepted_values != nullptr) list += std::string(" (") + f.accepted_values + ")";
  }
  return "vLLM's other `vllm serve` flags: accepted with a one-line notice (rill already behaves so, or the flag "
         "has no meaning here): " + accepted + ", -O (compilation level), --model M (= MODEL_DIR), "
         "--uvicorn-log-level (= --log-level). Refused with the reason: " + refused +
         " (and values outside the parentheses above).";
}

}  // namespace rill::cli
