#include "cli/parallel_flags.h"

#include "backend/cuda_backend_options.h"

#include "core/log.h"
#include "runner/parallel_executor.h"

namespace rill::cli {

void add_parallel_flags(CLI::App& app, ParallelFlags& f) {
  const char* group = "vLLM compatibility";
  app.add_option(
         "--tensor-parallel-size", f.tensor_parallel_size,
         "ranks per model replica (-tp; vLLM's): a GPU each (NCCL), or threads with --device cpu; under "
         "mpirun -np P (or srun --mpi=pmix; rill serve only) each process holds tp x pp / P of them, the "
         "first serves (MPI between CPU ranks, one per process; NCCL between GPUs)")
      ->check(CLI::Range(1, 1024))
      ->group(group);
  app.add_option("--expert-parallel-size", f.expert_parallel_size,
                 "-ep M: the routed experts split over M of the tp ranks (M divides tp; the rest of each "
                 "group splits every expert's width); default 1")
      ->check(CLI::Range(1, 1024))
      ->group(group);
  app.add_flag("--ranks-on-one-gpu", f.ranks_on_one_gpu,
               "with -tp N on CUDA: every rank on the --device GPU (tests the sharded path on one GPU)")
      ->group(group);
  app.add_option("--pipeline-parallel-size", f.pipeline_parallel_size,
                 "-pp P: pipeline stages of contiguous layers, each on its own -tp ranks (tp x pp ranks in all)")
      ->check(CLI::Range(1, 1024))
      ->group(group);
  app.add_option("--data-parallel-size", f.data_parallel_size, "model replicas (-dp; only 1)")
      ->check(CLI::Range(1, 1024))
      ->group(group);
  app.add_flag("--enable-expert-parallel", f.enable_expert_parallel,
               "vLLM's: expert parallelism over all the tp ranks (-ep = -tp)")
      ->group(group);
}

int expert_parallel_size(const ParallelFlags& f) {
  if (f.expert_parallel_size > 0) return f.expert_parallel_size;
  return f.enable_expert_parallel ? f.tensor_parallel_size : 1;
}

Status check_parallel_flags(const ParallelFlags& f, const DeviceOptions& device) {
  if (f.data_parallel_size != 1)
    return invalid_argument("--data-parallel-size {}: not built yet (only 1 is supported; tensor, expert and "
                            "pipeline parallelism are)",
                            f.data_parallel_size);
  if (f.enable_expert_parallel && f.expert_parallel_size > 0)
    return invalid_argument("--enable-expert-parallel and --expert-parallel-size {}: give one",
                            f.expert_parallel_size);
  if (f.enable_expert_parallel && f.tensor_parallel_size == 1)
    RILL_LOG_INFO("notice: --enable-expert-parallel: one rank holds every expert: there is nothing to split");
  const int ep = expert_parallel_size(f);
  if (f.tensor_parallel_size % ep != 0)
    return invalid_argument("--expert-parallel-size {} must divide --tensor-parallel-size {}", ep,
                            f.tensor_parallel_size);
  const bool cpu = device.device == "cpu" || (device.device == "auto" && !backend::cuda_backend_compiled());
  if (f.ranks_on_one_gpu && cpu)
    RILL_LOG_INFO("notice: --ranks-on-one-gpu: the CPU ranks are threads; nothing to place");
  return {};
}

int parse_with_parallel_flags(CLI::App& app, int argc, char** argv, const char* command,
                              const DeviceOptions& device, ParallelFlags& f) {
  add_parallel_flags(app, f);
  std::vector<std::string> args = expand_parallel_short_flags(argc, argv);
  std::vector<char*> ptrs;
  for (std::string& a : args) ptrs.push_back(a.data());
  if (int rc = parse_args(app, int(ptrs.size()), ptrs.data()); rc >= 0) return rc;
  if (Status st = check_parallel_flags(f, device); !st.ok()) return report_error(command, st);
  return -1;
}

namespace {

// `rill bench`'s dummy weights (its single-model rows load with the same seed).
constexpr uint64_t kDummySeed = 1234;

struct ShardedLoad {
  runner::RankLoader load;
  runner::ParallelOptions placement;
};

// The same placement as rill serve's single-process -tp N (serve.cc parallel_options): ranks as threads on the
// CPU, a GPU each from the --device one, or all on it with --ranks-on-one-gpu.
Result<ShardedLoad> sharded_load(const std::string& dir, const DeviceOptions& dev, const ParallelFlags& f,
                                 const backend::Backend& be, const model::ModelConfig* dummy = nullptr) {
  ShardedLoad out;
  runner::ParallelOptions& p = out.placement;
  p.sizes = {.world = f.ranks(),
             .tp = f.tensor_parallel_size,
             .ep = expert_parallel_size(f),
             .pp = f.pipeline_parallel_size};
  const bool cpu = be.device() == Device::Cpu;
  if (!cpu) {
    RILL_ASSIGN_OR_RETURN(p.comm.first_gpu, backend::parse_cuda_device(be.name()));
  }
  RILL_ASSIGN_OR_RETURN(p.comm.cuda, backend::parse_cuda_backend_options(dev.backend_options));
  p.comm.kind = cpu                  ? backend::CommKind::Threads
                : f.ranks_on_one_gpu ? backend::CommKind::SharedGpu
                                     : backend::CommKind::Nccl;
  if (dummy) {
    out.load = [config = *dummy](backend::Backend& rank_be, const model::ModelShard& shard) {
      return model::load_dummy_model(config, rank_be, kDummySeed, shard);
    };
  } else {
    out.load = [dir, quantization = dev.quantization](backend::Backend& rank_be, const model::ModelShard& shard) {
      model::LoadOptions lo;
      lo.shard = shard;
      lo.quantization = quantization;
      return model::load_model(dir, rank_be, lo);
    };
  }
  RILL_LOG_INFO("{} ranks (tp {} x pp {}, ep {}) on {}", f.ranks(), f.tensor_parallel_size,
                f.pipeline_parallel_size, expert_parallel_size(f), be.name());
  return out;
}

}  // namespace

Result<LocalExecutor> open_local_executor(const std::string& dir, const DeviceOptions& dev, const ParallelFlags& f,
                                          const runner::RunnerOptions& options, const model::ModelConfig* dummy) {
  LocalExecutor out;
  RILL_ASSIGN_OR_RETURN(out.be, open_backend(dev));
  if (f.ranks() == 1) {
    RILL_ASSIGN_OR_RETURN(auto m, dummy ? model::load_dummy_model(*dummy, *out.be, kDummySeed)
                                        : load_model_with_progress(dir, *out.be, dev.quantization));
    RILL_ASSIGN_OR_RETURN(out.executor, runner::make_local_executor(std::move(m), options));
    return out;
  }
  RILL_ASSIGN_OR_RETURN(ShardedLoad sharded, sharded_load(dir, dev, f, *out.be, dummy));
  RILL_ASSIGN_OR_RETURN(out.executor, runner::make_parallel_executor(sharded.load, sharded.placement, options));
  return out;
}

Result<std::unique_ptr<engine::Engine>> open_local_engine(const std::string& dir, const DeviceOptions& dev,
                                                          const ParallelFlags& f,
                                                          std::shared_ptr<const text::Tokenizer> tokenizer,
                                                          const engine::EngineOptions& options) {
  RILL_ASSIGN_OR_RETURN(std::unique_ptr<backend::Backend> be, open_backend(dev));
  if (f.ranks() == 1) {
    RILL_ASSIGN_OR_RETURN(auto m, load_model_with_progress(dir, *be, dev.quantization));
    return engine::Engine::create(runner::local_executor_factory(std::move(be), std::move(m)),
                                  std::move(tokenizer), options);
  }
  RILL_ASSIGN_OR_RETURN(ShardedLoad sharded, sharded_load(dir, dev, f, *be));
  be.reset();  // each rank opens its own
  auto make_executor = [sharded](const runner::RunnerOptions& ro) {
    return runner::make_parallel_executor(sharded.load, sharded.placement, ro);
  };
  return engine::Engine::create(make_executor, std::move(tokenizer), options);
}

}  // namespace rill::cli
