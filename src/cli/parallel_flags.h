// vLLM's parallel flags (-tp / -ep / -pp / -dp, --enable-expert-parallel, --ranks-on-one-gpu) with one meaning
// and one set of checks for every command that runs the model: serve (serve_vllm_flags.cc adds the rest of
// vLLM's surface), generate and chat (the engine over runner/parallel_executor), and the commands that drive
// steps without the engine (logits, perplexity, bench's step rows) through an Executor of one or more ranks.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "backend/backend.h"
#include "cli/common.h"
#include "core/status.h"
#include "engine/engine.h"
#include "runner/executor.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::cli {

struct ParallelFlags {
  int tensor_parallel_size = 1, pipeline_parallel_size = 1, data_parallel_size = 1;
  int expert_parallel_size = 0;  // -ep; 0: not given (1, or the tp size with --enable-expert-parallel)
  bool enable_expert_parallel = false;
  bool ranks_on_one_gpu = false;  // every rank on the --device GPU (testing the sharded path on one GPU)

  int ranks() const { return tensor_parallel_size * pipeline_parallel_size; }
};

// The flags, in the "vLLM compatibility" group of --help. Give the command's argv to
// expand_parallel_short_flags (common.h) first, for -tp 2 / -tp=2.
void add_parallel_flags(CLI::App& app, ParallelFlags& f);

// add_parallel_flags, then the command line parsed into `app` (expand_parallel_short_flags first, so -tp 2
// works) and check_parallel_flags: -1 to go on, else the exit code (a usage error, --help, or a refused flag
// reported as `command`'s).
int parse_with_parallel_flags(CLI::App& app, int argc, char** argv, const char* command,
                              const DeviceOptions& device, ParallelFlags& f);

// The checks every command makes after parsing: -dp 1 only, -ep divides -tp, one of -ep and
// --enable-expert-parallel; notices for what has nothing to do (--ranks-on-one-gpu on the CPU, ...).
Status check_parallel_flags(const ParallelFlags& f, const DeviceOptions& device);

// The expert-parallel size the flags ask for: -ep M, or vLLM's --enable-expert-parallel (= the tp size).
int expert_parallel_size(const ParallelFlags& f);

// The model of MODEL_DIR behind an Executor on `dev`: one rank, or the sharded world the flags describe (the
// same placement as serve's single-process -tp N). `dummy` (optional): `--load-format dummy`, seeded random
// weights of that config instead of MODEL_DIR's. `be` is the --device backend and must outlive `executor`.
struct LocalExecutor {
  std::unique_ptr<backend::Backend> be;
  std::unique_ptr<runner::Executor> executor;
};
Result<LocalExecutor> open_local_executor(const std::string& dir, const DeviceOptions& dev, const ParallelFlags& f,
                                          const runner::RunnerOptions& options,
                                          const model::ModelConfig* dummy = nullptr);

// An engine over MODEL_DIR on `dev`: one model, or with several ranks the sharded executor (threads on the CPU,
// a GPU each from the --device one, or all on it with --ranks-on-one-gpu). Its executor owns the backends and
// the models (the draft model of `options.speculative` too, on rank 0's device).
Result<std::unique_ptr<engine::Engine>> open_local_engine(const std::string& dir, const DeviceOptions& dev,
                                                          const ParallelFlags& f,
                                                          std::shared_ptr<const text::Tokenizer> tokenizer,
                                                          const engine::EngineOptions& options);

}  // namespace rill::cli
