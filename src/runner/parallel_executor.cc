#include "runner/parallel_executor.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "core/log.h"

namespace rill::runner {
namespace {

// A rank's thread must not end the process with an exception: it becomes the rank's error.
Status guarded(const std::function<Status()>& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return internal_error("exception: {}", e.what());
  } catch (...) {
    return internal_error("unknown exception");
  }
}

// One rank's part: made on the rank's own thread (which its backend binds), kept alive until the executor
// goes. Members in the order they must be destroyed in reverse: the runner (the model) before the communicator
// its shard points to (tp, pp), all before the backend.
struct Rank {
  std::unique_ptr<backend::Backend> be;
  std::unique_ptr<dist::Communicator> tp_comm, pp_comm;
  std::unique_ptr<ModelRunner> runner;
};

class ParallelExecutor final : public Executor {
 public:
  ParallelExecutor(std::unique_ptr<backend::CommWorld> world, std::vector<Rank> ranks)
      : world_(std::move(world)),
        ranks_(std::move(ranks)),
        worker_status_(ranks_.size()),
        worker_failed_first_(ranks_.size(), false) {}

  // Starts the threads of ranks 1.. (rank 0 runs on the engine thread).
  void start() {
    for (size_t r = 1; r < ranks_.size(); ++r) workers_.emplace_back([this, r] { worker_loop(int(r)); });
  }

  ~ParallelExecutor() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    step_cv_.notify_all();
    for (auto& t : workers_) t.join();
    for (size_t r = ranks_.size(); r-- > 0;) {  // the runner (its model, caches, sampler) before what it uses
      Rank& rank = ranks_[r];
      rank.runner.reset();
      rank.pp_comm.reset();
      rank.tp_comm.reset();
      rank.be.reset();
    }
  }

  Status bind_thread() override { return ranks_[0].runner->bind_thread(); }

  Result<StepOutput> execute(const model::StepBatch& batch, const SamplingBatch& sampling,
                             const cache::CacheOps& ops) override {
    if (!broken_.ok()) return broken_;
    {
      std::lock_guard lock(mu_);
      batch_ = &batch;
      ops_ = &ops;
      pending_ = int(ranks_.size()) - 1;
      ++generation_;
    }
    step_cv_.notify_all();
    Result<StepOutput> out = ranks_[0].runner->execute(batch, sampling, ops);
    if (!out.ok()) {  // frees the ranks waiting in a collective
      world_failures_++;
      world_->fail(0, out.status().to_string());
    }
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    // The first rank that failed of its own accord is the cause; the others report its failure.
    for (size_t r = 1; r < ranks_.size(); ++r)
      if (!worker_status_[r].ok() && worker_failed_first_[r]) {
        broken_ = Status(worker_status_[r].code(), fmt::format("rank {}: {}", r, worker_status_[r].message()));
        return broken_;
      }
    if (!out.ok()) {
      broken_ = Status(out.status().code(), fmt::format("rank 0: {}", out.status().message()));
      return broken_;
    }
    return out;
  }

  const model::Model& model() const override { return ranks_[0].runner->model(); }
  const cache::MemoryPlan& memory_plan() const override { return ranks_[0].runner->memory_plan(); }
  const cache::PrefixCacheOptions& prefix_options() const override { return ranks_[0].runner->prefix_options(); }
  int max_model_len() const override { return ranks_[0].runner->max_model_len(); }
  std::unique_ptr<model::Model> release_model() override { return nullptr; }  // a shard is no whole model

 private:
  void worker_loop(int r) {
    Rank& rank = ranks_[size_t(r)];
    if (Status st = rank.runner->bind_thread(); !st.ok()) world_->fail(r, st.to_string());
    uint64_t seen = 0;
    for (;;) {
      const model::StepBatch* batch;
      const cache::CacheOps* ops;
      {
        std::unique_lock lock(mu_);
        step_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        batch = batch_;
        ops = ops_;
      }
      Status st = guarded([&] { return rank.runner->forward(*batch, *ops).status(); });
      // A rank that fails before any other has is the cause; it ends the others' waits.
      bool first = false;
      if (!st.ok()) {
        first = world_failures_++ == 0;
        world_->fail(r, st.to_string());
      }
      {
        std::lock_guard lock(mu_);
        worker_status_[size_t(r)] = st;
        worker_failed_first_[size_t(r)] = first;
        --pending_;
      }
      done_cv_.notify_all();
    }
  }

  std::unique_ptr<backend::CommWorld> world_;
  std::vector<Rank> ranks_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable step_cv_, done_cv_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  const model::StepBatch* batch_ = nullptr;
  const cache::CacheOps* ops_ = nullptr;
  std::vector<Status> worker_status_;
  std::vector<bool> worker_failed_first_;
  std::atomic<int> world_failures_{0};
  Status broken_;  // after a failed step: every later step answers this
};

// The reason a rank's setup failed, preferring a rank's own error over the "rank N failed" echoes of it.
Status first_cause(const std::vector<Status>& statuses) {
  const Status* echo = nullptr;
  for (size_t r = 0; r < statuses.size(); ++r) {
    const Status& s = statuses[r];
    if (s.ok()) continue;
    if (s.message().find("failed: ") == std::string::npos)
      return Status(s.code(), fmt::format("rank {}: {}", r, s.message()));
    if (!echo) echo = &s;
  }
  return echo ? *echo : Status{};
}

}  // namespace

Result<std::unique_ptr<Executor>> make_parallel_executor(const RankLoader& load, const ParallelOptions& p,
                                                         const RunnerOptions& o) {
  const dist::ParallelSizes& sizes = p.sizes;
  if (sizes.dp != 1 || sizes.world != sizes.tp * sizes.pp)
    return unimplemented("data parallelism is not built yet (world {} = tp {} x pp {} x dp {})", sizes.world,
                         sizes.tp, sizes.pp, sizes.dp);
  RILL_ASSIGN_OR_RETURN(std::unique_ptr<backend::CommWorld> world, backend::CommWorld::make(sizes.world, p.comm));
  RunnerOptions ro = o;
  if (sizes.world > 1) ro.enforce_eager = true;  // see the header
  std::vector<Rank> ranks(static_cast<size_t>(sizes.world));
  std::vector<Status> statuses(ranks.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < sizes.world; ++r)
    threads.emplace_back([&, r] {
      auto setup = [&]() -> Status {
        RILL_ASSIGN_OR_RETURN(dist::Mapping mapping, dist::Mapping::make(sizes, r));
        Rank& rank = ranks[size_t(r)];
        RILL_ASSIGN_OR_RETURN(rank.be, world->make_backend(r));
        // Every rank makes its groups in the same order (tp, then pp): NCCL's are collective over the world.
        if (sizes.tp > 1) {
          RILL_ASSIGN_OR_RETURN(rank.tp_comm,
                                world->communicator(r, mapping.group(dist::GroupKind::Tp), *rank.be));
        }
        if (sizes.pp > 1) {
          RILL_ASSIGN_OR_RETURN(rank.pp_comm,
                                world->communicator(r, mapping.group(dist::GroupKind::Pp), *rank.be));
        }
        RILL_ASSIGN_OR_RETURN(
            auto model,
            load(*rank.be, model::ModelShard::from_mapping(mapping, rank.tp_comm.get(), rank.pp_comm.get())));
        RILL_ASSIGN_OR_RETURN(rank.runner, ModelRunner::create(std::move(model), ro));
        return {};
      };
      statuses[size_t(r)] = guarded(setup);
      if (!statuses[size_t(r)].ok()) world->fail(r, statuses[size_t(r)].to_string());
    });
  for (auto& t : threads) t.join();
  RILL_TRY(first_cause(statuses));
  // Ids are global: every rank must have the same blocks and slots. Ranks may plan different block counts
  // (pipeline stages hold different layers; ranks sharing a GPU see what the others took): capacity is the
  // minimum, so every rank's caches are planned again with that many blocks.
  int min_blocks = ranks[0].runner->memory_plan().n_blocks;
  bool differ = false;
  for (const Rank& rank : ranks) {
    differ = differ || rank.runner->memory_plan().n_blocks != min_blocks;
    min_blocks = std::min(min_blocks, rank.runner->memory_plan().n_blocks);
  }
  if (differ) {
    RunnerOptions same = ro;
    same.num_kv_blocks = min_blocks;
    std::vector<std::unique_ptr<model::Model>> models(ranks.size());
    auto on_each_rank = [&](const std::function<Status(size_t)>& fn) {
      threads.clear();
      for (size_t r = 0; r < ranks.size(); ++r)
        threads.emplace_back([&, r] {
          statuses[r] = ranks[r].be->bind_thread();
          if (statuses[r].ok()) statuses[r] = fn(r);
        });
      for (auto& t : threads) t.join();
      return first_cause(statuses);
    };
    RILL_TRY(on_each_rank([&](size_t r) {  // every rank's caches go first, then each plans again
      models[r] = ranks[r].runner->release_model();
      ranks[r].runner.reset();
      return Status{};
    }));
    RILL_TRY(on_each_rank([&](size_t r) -> Status {
      RILL_ASSIGN_OR_RETURN(ranks[r].runner, ModelRunner::create(std::move(models[r]), same));
      return {};
    }));
  }
  const cache::MemoryPlan& lead = ranks[0].runner->memory_plan();
  for (size_t r = 1; r < ranks.size(); ++r) {
    const cache::MemoryPlan& mine = ranks[r].runner->memory_plan();
    if (mine.n_blocks != lead.n_blocks || mine.n_slots != lead.n_slots || mine.n_snapshots != lead.n_snapshots)
      return internal_error("rank {} plans {} MLA blocks, {} state slots and {} snapshots, rank 0 {}, {} and {}",
                            r, mine.n_blocks, mine.n_slots, mine.n_snapshots, lead.n_blocks, lead.n_slots,
                            lead.n_snapshots);
  }
  RILL_LOG_INFO("{} ranks ({} communicators): {}", sizes.world, backend::comm_kind_name(p.comm.kind),
                ranks[0].runner->model().shard().describe());
  auto exec = std::make_unique<ParallelExecutor>(std::move(world), std::move(ranks));
  exec->start();
  return std::unique_ptr<Executor>(std::move(exec));
}

}  // namespace rill::runner
