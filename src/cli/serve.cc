// rill serve MODEL_DIR [--host --port ...]: the OpenAI-compatible server (server/). Flags follow vLLM /
// trtllm-serve; `_` spellings (--max_batch_size) and the vLLM / trtllm names of the same knobs
// (--max-num-seqs, --max-num-batched-tokens, --max-seq-len, --free-gpu-memory-fraction, -tp) are accepted,
// so a vLLM command line starts rill unchanged: flags with nothing to do here get a one-line notice
// (serve_vllm_flags.cc), values this build cannot honour a clear error.
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda_backend_options.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/serve_vllm_flags.h"
#include "cli/vllm_flag_table.h"
#include "core/log.h"
#include "dist/mpi_bootstrap.h"
#include "dist/process_link.h"
#include "runner/parallel_executor.h"
#include "server/metrics.h"
#include "server/server.h"

namespace rill::cli {
namespace {

// This process's place in an mpirun / srun job (issue #17): the link to the other processes when there are
// several; none when rill was started without mpirun.
struct MpiJob {
  dist::MpiWorld world;
  std::unique_ptr<dist::ProcessLink> link;
};

Result<MpiJob> join_mpi_job(const VllmFlags& f) {
  MpiJob job;
  if (!dist::mpi_launched()) return job;
  // MPI_Init starts threads of its own, which inherit this thread's signal mask: SIGINT and SIGTERM must be
  // blocked in them too, or the kernel may hand the server's stop signal to one of them, whose default action
  // ends the process instead of the server's drain (server.cc takes the signals on one thread).
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  RILL_ASSIGN_OR_RETURN(job.world, dist::mpi_init());
  if (job.world.size == 1) return job;
  const int ranks = f.tensor_parallel_size * f.pipeline_parallel_size;
  if (ranks % job.world.size != 0)
    return invalid_argument(
        "{} processes (mpirun -np) for {} ranks (--tensor-parallel-size {} x --pipeline-parallel-size {}): "
        "each process holds the same number of ranks, so -np must divide the ranks",
        job.world.size, ranks, f.tensor_parallel_size, f.pipeline_parallel_size);
  RILL_ASSIGN_OR_RETURN(job.link, dist::ProcessLink::make(job.world));
  return job;
}

// Tests (tests/e2e/mpi_serve_test.mjs): RILL_FAULT_INJECTION=RANK:STEP makes world rank RANK fail on purpose,
// in its load (STEP 0) or with an exception in its STEP-th step, to show that the other ranks end instead of
// hanging.
Result<runner::FaultInjection> fault_injection_from_env() {
  runner::FaultInjection fault;
  const char* v = std::getenv("RILL_FAULT_INJECTION");
  if (v == nullptr || *v == '\0') return fault;
  char end = 0;
  if (std::sscanf(v, "%d:%d%c", &fault.rank, &fault.at_step, &end) != 2 || fault.rank < 0 ||
      fault.at_step < 0)
    return invalid_argument("RILL_FAULT_INJECTION={}: expected RANK:STEP (STEP 0: the rank's load)", v);
  RILL_LOG_WARN("RILL_FAULT_INJECTION: rank {} will fail {}", fault.rank,
                fault.at_step == 0 ? std::string("its load") : fmt::format("in step {}", fault.at_step));
  return fault;
}

// -tp N (-pp P): the ranks on the device `probe` resolved --device to: threads on the CPU, a GPU each from
// its index on (NCCL), or all on it with --ranks-on-one-gpu; under mpirun this process's share of them (MPI
// on the CPU, one rank per process; NCCL on the GPUs of each process from local rank x ranks per process on).
Result<runner::ParallelOptions> parallel_options(const backend::Backend& probe, const VllmFlags& f,
                                                 const MpiJob& job, const DeviceOptions& dev) {
  runner::ParallelOptions p;
  p.sizes = {.world = f.tensor_parallel_size * f.pipeline_parallel_size,
             .tp = f.tensor_parallel_size,
             .ep = expert_parallel_size(f),
             .pp = f.pipeline_parallel_size};
  p.link = job.link.get();
  RILL_ASSIGN_OR_RETURN(p.fault, fault_injection_from_env());
  RILL_ASSIGN_OR_RETURN(p.comm.cuda, backend::parse_cuda_backend_options(dev.backend_options));
  const bool cpu = probe.device() == Device::Cpu;
  if (!cpu) {
    RILL_ASSIGN_OR_RETURN(p.comm.first_gpu, backend::parse_cuda_device(probe.name()));
  }
  if (p.link != nullptr) {
    p.comm.kind = backend::CommKind::Mpi;
    p.comm.mpi_gpus = !cpu;
    if (!cpu) p.comm.first_gpu += job.world.local_rank * (p.sizes.world / job.world.size);
    if (f.ranks_on_one_gpu)
      return invalid_argument(
          "--ranks-on-one-gpu puts the ranks of one process on one GPU; under mpirun each "
          "process's ranks have a GPU each");
  } else {
    p.comm.kind = cpu                  ? backend::CommKind::Threads
                  : f.ranks_on_one_gpu ? backend::CommKind::SharedGpu
                                       : backend::CommKind::Nccl;
  }
  return p;
}

// Each rank loads its shard; rank 0 (the leader's) reports the progress.
runner::RankLoader rank_loader(const std::string& dir, const model::LoadOptions& lo) {
  return [dir, lo](backend::Backend& be, const model::ModelShard& shard) {
    model::LoadOptions mine = lo;
    mine.shard = shard;
    if (shard.tp_rank != 0) mine.progress = {};
    return model::load_model(dir, be, mine);
  };
}

// -tp N: each rank opens its backend and loads its shard when the executor is made.
Result<engine::Engine::ExecutorFactory> parallel_executor_factory(const std::string& dir,
                                                                  const model::LoadOptions& lo,
                                                                  const backend::Backend& probe,
                                                                  const VllmFlags& f, const MpiJob& job,
                                                                  const DeviceOptions& dev) {
  RILL_ASSIGN_OR_RETURN(runner::ParallelOptions p, parallel_options(probe, f, job, dev));
  runner::RankLoader load = rank_loader(dir, lo);
  return engine::Engine::ExecutorFactory([load, p](const runner::RunnerOptions& ro) {
    return runner::make_parallel_executor(load, p, ro);
  });
}

// A process of an mpirun job other than the first: no server; its ranks run the leader's steps.
int run_worker_process(const std::string& dir, const DeviceOptions& dev, const std::string& load_format,
                       const VllmFlags& f, const MpiJob& job) {
  // No server here to drain: a stop signal ends this process as by default (mpirun then ends the job).
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &stop, nullptr);
  auto run = [&]() -> Status {
    // Errors before the ranks exist name the process (later ones name the rank).
    const std::string where = fmt::format("process {} of {}", job.world.rank, job.world.size);
    auto probe = open_backend(dev);
    if (!probe.ok()) return probe.status().with_context(where);
    auto p = parallel_options(**probe, f, job, dev);
    if (!p.ok()) return p.status().with_context(where);
    probe->reset();
    model::LoadOptions lo;
    lo.dummy_weights = load_format == "dummy";
    lo.quantization = dev.quantization;
    RILL_LOG_INFO("rill serve: process {} of {} (pid {}): world ranks from {} run the leader's steps",
                  job.world.rank, job.world.size, int(getpid()),
                  job.world.rank * (p->sizes.world / job.world.size));
    return runner::run_parallel_worker(rank_loader(dir, lo), *p);
  };
  const Status st = run();
  dist::mpi_finalize();
  if (!st.ok()) return report_error("serve", st);
  return 0;
}

// "--max_batch_size=8" -> "--max-batch-size=8"; other-server names -> rill's.
std::vector<std::string> normalize_flags(int argc, char** argv) {
  static const std::pair<const char*, const char*> kAliases[] = {
      {"--max-num-seqs", "--max-batch-size"},
      {"--max-num-batched-tokens", "--max-num-tokens"},
      {"--max-seq-len", "--max-model-len"},
      {"--free-gpu-memory-fraction", "--kv-cache-fraction"},
      {"--kv-cache-free-gpu-memory-fraction", "--kv-cache-fraction"},
  };
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string a = i > 0 ? expand_parallel_short_flag(argv[i]) : std::string(argv[i]);
    if (i > 0 && a.starts_with("--")) {
      const size_t eq = a.find('=');
      std::string name = a.substr(0, eq), rest = eq == std::string::npos ? "" : a.substr(eq);
      for (char& c : name)
        if (c == '_') c = '-';
      for (const auto& [from, to] : kAliases)
        if (name == from) name = to;
      a = name + rest;
    }
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace

int run_serve(int argc, char** argv) {
  CLI::App app{
      "OpenAI-compatible HTTP server: /v1/chat/completions, /v1/completions, /v1/models, /health, "
      "/metrics, /tokenize, /detokenize, /v1/responses. SIGINT/SIGTERM drain running requests, then exit 0.",
      "rill serve"};
  server::ServerOptions o;
  DeviceOptions dev;
  app.add_option("MODEL_DIR", o.model_dir, "Hugging Face checkpoint directory")->required();
  app.add_option("--host", o.host, "address to listen on")->capture_default_str();
  app.add_option("--port", o.port, "TCP port (0: any free port, printed at start)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option(
         "--served-model-name", o.served_model_names,
         "the model ids clients may send, one or more (vLLM); /v1/models lists them all, a response names "
         "the one asked for, metrics the first (default: MODEL_DIR's last component)")
      ->expected(1, -1);
  app.add_option(
      "--api-key", o.api_key,
      "require `Authorization: Bearer KEY` (401 otherwise) on every route but /health and /metrics "
      "(/metrics too with --api-key-metrics)");
  app.add_option("--max-batch-size", o.engine.max_batch_size,
                 "sequences per engine step, = KDA state slots (vLLM --max-num-seqs)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxBatchSizeFlag));
  app.add_option(
         "--max-num-tokens", o.engine.max_num_tokens,
         "tokens per engine step; prefill chunks fill what decode leaves (vLLM --max-num-batched-tokens)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxStepTokensFlag));
  app.add_option("--max-model-len", o.engine.max_model_len,
                 "context length, prompt + completion (0: the model's, capped by the cache; CPU: 8192)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxContextFlag));
  app.add_option("--kv-cache-fraction", o.engine.kv_cache_fraction,
                 "GPU: fraction of the memory free after the weights given to caches")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
  app.add_option("--num-kv-blocks", o.engine.num_kv_blocks,
                 "MLA KV cache blocks (overrides --kv-cache-fraction; 0: sized automatically)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxKvBlocksFlag));
  app.add_flag(
      "--enable-prefix-caching", o.engine.enable_prefix_caching,
      "keep full KV blocks and KDA state snapshots after each request and resume requests that start "
      "with the same tokens from them (usage.prompt_tokens_details.cached_tokens counts the reuse)");
  app.add_option(
         "--kda-snapshot-interval", o.engine.kda_snapshot_interval,
         "with prefix caching: tokens between KDA state snapshots while prefilling (a multiple of 64); "
         "prefill chunks end at each snapshot position")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxContextFlag));
  app.add_option(
         "--kda-snapshot-budget", o.engine.kda_snapshot_budget_mib,
         "with prefix caching: MiB of device memory for KDA state snapshots (taken from the KV cache)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxMiBFlag));
  app.add_option("--mask-threads", o.engine.mask_threads,
                 "threads computing grammar-constrained requests' token masks, off the engine thread "
                 "(0: an eighth of the hardware threads, 1 to 4)")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  app.add_option("--max-queue", o.engine.max_queue, "waiting requests before new ones get HTTP 429")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--shutdown-timeout", o.shutdown_timeout_s,
                 "seconds running requests get to finish after SIGINT/SIGTERM before they are cancelled")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));  // a day
  app.add_option("--http-threads", o.http.handler_threads,
                 "requests handled at once (streams hold one only while they write; idle and still-arriving "
                 "connections hold none)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--http-io-threads", o.http.io_threads, "threads that run the sockets (no route code)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--max-connections", o.http.max_connections,
                 "open connections at once; beyond it a new connection gets HTTP 503 and is closed")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-request-bytes", o.http.max_body_bytes,
                 "largest request body accepted, after chunked decoding too (HTTP 413 above)")
      ->capture_default_str()
      ->check(CLI::Range(size_t(1), size_t(1) << 32));  // 4 GiB
  app.add_option("--max-request-memory", o.http.request_memory_bytes,
                 "bytes all request bodies being read and parsed may hold together (each body counts 33 "
                 "times its size once complete, for its parse); over it a request gets HTTP 503 (0: a "
                 "quarter of the memory available at start, 256 MiB to 8 GiB)")
      ->capture_default_str()
      ->check(CLI::Range(size_t(0), size_t(1) << 40));
  app.add_option("--max-connections-per-client", o.http.max_connections_per_client,
                 "open connections from one client address; beyond it a new one gets HTTP 503 and is "
                 "closed (0: no limit)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--max-header-bytes", o.http.max_header_bytes,
                 "largest request line + headers accepted (HTTP 431 above)")
      ->capture_default_str()
      ->check(CLI::Range(size_t(1024), size_t(1) << 24));
  auto seconds = [](std::chrono::milliseconds d) { return double(d.count()) / 1000; };
  double header_timeout = seconds(o.http.header_timeout), body_timeout = seconds(o.http.body_timeout),
         keep_alive_timeout = seconds(o.http.keep_alive_timeout),
         write_timeout = seconds(o.http.write_timeout);
  app.add_option(
         "--header-timeout", header_timeout,
         "seconds a request's line and headers may take in all, from their first byte (or the accept); "
         "then the connection is closed")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--body-timeout", body_timeout,
                 "seconds a request body may take in all, from the end of the headers")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--keep-alive-timeout", keep_alive_timeout,
                 "seconds an idle keep-alive connection is kept between requests")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option(
         "--write-timeout", write_timeout,
         "seconds one write to a client (a response, one stream chunk) may stall before the connection "
         "is closed (a stream's generation is then cancelled)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_flag("--api-key-metrics", o.api_key_metrics, "with --api-key: /metrics needs the key too");
  // CORS (vLLM's flags; server/cors.h).
  std::string allowed_origins, allowed_methods = "*", allowed_headers = "*";
  app.add_option("--allowed-origins", allowed_origins,
                 "origins browsers may call from, comma-separated, or * for any (default: none, no CORS "
                 "headers); preflights are answered 204 without the API key");
  app.add_option("--allowed-methods", allowed_methods, "with --allowed-origins: methods allowed, or *")
      ->capture_default_str();
  app.add_option("--allowed-headers", allowed_headers,
                 "with --allowed-origins: request headers allowed, or *")
      ->capture_default_str();
  std::string load_format = "auto";
  app.add_option(
         "--load-format", load_format,
         "auto (or safetensors): weights from MODEL_DIR; dummy: seeded random weights on the device (MODEL_DIR needs only "
         "config.json and the tokenizer files) for benchmarks without a download")
      ->check(CLI::IsMember({"auto", "safetensors", "dummy"}))
      ->capture_default_str();
  std::string speculative_config;
  app.add_option(
      "--speculative-config", speculative_config,
      "speculative decoding, vLLM's JSON: {\"method\": \"ngram\", \"num_speculative_tokens\": K, "
      "\"prompt_lookup_max\": N, \"prompt_lookup_min\": M} or {\"method\": \"suffix\", "
      "\"num_speculative_tokens\": K, \"suffix_decoding_max_tree_depth\": 24, "
      "\"suffix_decoding_max_cached_requests\": 1000, \"suffix_decoding_min_token_prob\": 0.1, "
      "\"suffix_decoding_max_spec_factor\": 1.0} or {\"method\": \"draft_model\", \"model\": DIR, "
      "\"num_speculative_tokens\": K} (a smaller checkpoint with the same vocabulary, on the first device); "
      "requests are verified K drafts at a time (greedy and seeded: the same output; sampled: the same "
      "distribution; fewer steps)");
  std::string metrics_prefix = "rill";
  app.add_option("--metrics-prefix", metrics_prefix,
                 "the prefix of /metrics names: rill (rill:num_requests_running, ...) or vllm, whose names and "
                 "meanings are vLLM's, so vLLM dashboards and autoscalers work unchanged (docs/METRICS.md)")
      ->capture_default_str()
      ->check([](const std::string& v) -> std::string {
        const bool ok = !v.empty() && !std::isdigit(static_cast<unsigned char>(v[0])) &&
                        std::all_of(v.begin(), v.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
        return ok ? "" : "\"" + v + "\" is not a Prometheus name prefix (letters, digits, _)";
      });
  add_device_options(app, dev);
  VllmFlags vllm;
  add_vllm_flags(app, o, vllm);

  app.footer(vllm_only_flags_help());

  std::vector<std::string> args = normalize_flags(argc, argv);
  auto vllm_notices = take_vllm_only_flags(args, app);
  if (!vllm_notices.ok()) return report_error("serve", vllm_notices.status());
  std::vector<char*> ptrs;
  for (std::string& a : args) ptrs.push_back(a.data());
  if (int rc = parse_args(app, int(ptrs.size()), ptrs.data(), vllm_flag_names()); rc >= 0) return rc;
  for (const std::string& n : *vllm_notices) RILL_LOG_INFO("notice: {}", n);
  if (vllm.gpu_memory_utilization > 0 && app.count("--kv-cache-fraction") > 0)
    return report_error(
        "serve", invalid_argument("--gpu-memory-utilization {} and --kv-cache-fraction {} both size the "
                                  "caches: give one (the first is a share of the device's total "
                                  "memory, the second of the memory free after the weights)",
                                  vllm.gpu_memory_utilization, o.engine.kv_cache_fraction));
  if (Status st = apply_vllm_flags(vllm, dev, o); !st.ok()) return report_error("serve", st);
  if (!speculative_config.empty()) {
    auto spec = engine::spec::parse_speculative_config(speculative_config, /*draft_models=*/true);
    if (!spec.ok()) return report_error("serve", spec.status());
    o.engine.speculative = *spec;
    if (spec->method == "draft_model") {
      if (Status st = check_draft_model(o.model_dir, spec->draft_model); !st.ok()) return report_error("serve", st);
    }
  }
  o.startup_flags = given_flags(app);
  server::set_metrics_prefix(metrics_prefix);
  auto ms = [](double seconds) { return std::chrono::milliseconds(int64_t(seconds * 1000)); };
  o.http.header_timeout = ms(header_timeout);
  o.http.body_timeout = ms(body_timeout);
  o.http.keep_alive_timeout = ms(keep_alive_timeout);
  o.http.write_timeout = ms(write_timeout);
  o.cors.allowed_origins = server::split_comma_list(allowed_origins);
  o.cors.allowed_methods = server::split_comma_list(allowed_methods);
  o.cors.allowed_headers = server::split_comma_list(allowed_headers);

  // Under mpirun every process parses the same flags; the first serves, the others run its steps.
  auto job = join_mpi_job(vllm);
  if (!job.ok()) {
    dist::mpi_finalize();
    return report_error("serve", job.status());
  }
  if (job->link != nullptr && !job->link->is_leader())
    return run_worker_process(o.model_dir, dev, load_format, vllm, *job);

  o.engine.draft_dummy_weights = load_format == "dummy";
  // The executor owns what this opens: the backend and the model, or (-tp N, each rank opening its own) the
  // ranks; this probe then goes, not to hold memory on a rank's GPU. The draft model is the executor's too.
  auto loader = [&](const model::LoadProgress& progress) -> Result<engine::Engine::ExecutorFactory> {
    RILL_ASSIGN_OR_RETURN(auto backend, open_backend(dev));
    model::LoadOptions lo;
    lo.progress = progress;
    lo.dummy_weights = load_format == "dummy";
    lo.quantization = dev.quantization;
    if (vllm.tensor_parallel_size * vllm.pipeline_parallel_size > 1)
      return parallel_executor_factory(o.model_dir, lo, *backend, vllm, *job, dev);
    RILL_ASSIGN_OR_RETURN(auto model, model::load_model(o.model_dir, *backend, lo));
    return runner::local_executor_factory(std::move(backend), std::move(model));
  };
  const int rc = server::run_server(o, loader);
  if (job->link != nullptr) {
    job->link->release_workers();  // when the server stopped before its executor was made (which does it)
    job->link.reset();
  }
  if (dist::mpi_launched()) dist::mpi_finalize();
  return rc;
}

}  // namespace rill::cli
