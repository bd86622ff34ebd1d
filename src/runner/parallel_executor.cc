#include "runner/parallel_executor.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "core/log.h"
#include "runner/wire_format.h"

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
// goes. Members in the order they must be destroyed in reverse: the runner (the model) before the
// communicator its shard points to (tp, pp), all before the backend. World rank 0 also runs the draft model
// (RunnerOptions::draft), unsplit, on its backend.
struct Rank {
  std::unique_ptr<backend::Backend> be;
  std::unique_ptr<dist::Communicator> tp_comm, pp_comm;
  std::unique_ptr<DraftProposer> draft;
  std::unique_ptr<ModelRunner> runner;
  int steps = 0;  // for FaultInjection
};

// Across processes a failed rank can leave ranks of other processes in MPI waits that nothing here can end:
// log the cause naming the rank (mpirun forwards it) and end every process of the job.
[[noreturn]] void end_job(dist::ProcessLink& link, const Status& st) {
  RILL_LOG_ERROR("{}; ending the job (ranks in other processes cannot be freed from their MPI waits)",
                 st.message());
  std::fflush(nullptr);
  link.abort_job(1);
  std::_Exit(1);  // not reached: GCC does not carry [[noreturn]] through a virtual call
}

class ParallelExecutor final : public Executor {
 public:
  ParallelExecutor(std::unique_ptr<backend::CommWorld> world, std::vector<Rank> ranks, int first_rank,
                   dist::ProcessLink* link, FaultInjection fault)
      : world_(std::move(world)),
        ranks_(std::move(ranks)),
        first_rank_(first_rank),
        link_(link),
        fault_(fault),
        worker_status_(ranks_.size()),
        worker_failed_first_(ranks_.size(), false) {}

  // Starts the threads of local ranks 1.. (local rank 0 runs on the calling thread: the engine's, or a worker
  // process's main thread).
  void start() {
    for (size_t r = 1; r < ranks_.size(); ++r) workers_.emplace_back([this, r] { worker_loop(int(r)); });
  }

  ~ParallelExecutor() override {
    if (link_ != nullptr) link_->release_workers();  // the leader's: the worker processes tear down meanwhile
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    step_cv_.notify_all();
    for (auto& t : workers_) t.join();
    for (size_t r = ranks_.size(); r-- > 0;) {  // the runner (its model, caches, sampler) before what it uses
      Rank& rank = ranks_[r];
      rank.runner.reset();
      rank.draft.reset();
      rank.pp_comm.reset();
      rank.tp_comm.reset();
      rank.be.reset();
    }
  }

  Status bind_thread() override { return ranks_[0].runner->bind_thread(); }

  Result<StepOutput> execute(const model::StepBatch& batch, const SamplingBatch& sampling,
                             const cache::CacheOps& ops) override {
    if (!broken_.ok()) return broken_;
    if (link_ != nullptr) {
      if (Status st = link_->send_to_workers(dist::LinkTag::Step, encode_step(batch, ops)); !st.ok())
        end_job(Status(st.code(),
                       fmt::format("rank 0: sending the step to the worker processes: {}", st.message())));
    }
    Result<StepOutput> out = run_step(batch, ops, &sampling);
    if (!out.ok() && link_ != nullptr) end_job(out.status());
    return out;
  }

  // A worker process's loop: each step from the leader, run by this process's ranks, until Shutdown.
  Status serve_steps() {
    for (;;) {
      Result<dist::LinkMessage> m = link_->receive(0);
      if (!m.ok()) end_job(m.status().with_context(fmt::format("rank {}: waiting for a step", first_rank_)));
      if (m->tag == dist::LinkTag::Shutdown) return {};
      if (m->tag != dist::LinkTag::Step)
        end_job(internal_error("rank {}: a {} message from the leader where a step was due", first_rank_,
                               dist::link_tag_name(m->tag)));
      Result<StepMessage> step = decode_step(m->bytes);
      if (!step.ok()) end_job(step.status().with_context(fmt::format("rank {}", first_rank_)));
      if (Result<StepOutput> out = run_step(step->batch, step->ops, nullptr); !out.ok())
        end_job(out.status());
    }
  }

  const model::Model& model() const override { return ranks_[0].runner->model(); }
  const cache::MemoryPlan& memory_plan() const override { return ranks_[0].runner->memory_plan(); }
  const cache::PrefixCacheOptions& prefix_options() const override {
    return ranks_[0].runner->prefix_options();
  }
  int max_model_len() const override { return ranks_[0].runner->max_model_len(); }
  std::string device_description() const override { return ranks_[0].be->device_description(); }
  // The engine thread runs rank 0: its draft steps go between the world's steps, on rank 0's device.
  bool has_draft_model() const override { return ranks_[0].draft != nullptr; }
  std::vector<std::vector<int32_t>> propose_drafts(std::span<const DraftRequest> requests) override {
    return ranks_[0].draft ? ranks_[0].draft->propose(requests) : Executor::propose_drafts(requests);
  }
  std::unique_ptr<model::Model> release_model() override { return nullptr; }  // a shard is no whole model

 private:
  // Local rank i's part of a step: with `sampling` (the leader's rank 0) it samples, else it only runs.
  Status run_rank(size_t i, const model::StepBatch& batch, const cache::CacheOps& ops,
                  const SamplingBatch* sampling, StepOutput* out) {
    Rank& rank = ranks_[i];
    ++rank.steps;
    if (fault_.rank == first_rank_ + int(i) && fault_.at_step == rank.steps)
      throw std::runtime_error(fmt::format("fault injected in step {} (RILL_FAULT_INJECTION)", rank.steps));
    if (sampling == nullptr) return rank.runner->forward(batch, ops).status();
    RILL_ASSIGN_OR_RETURN(*out, rank.runner->execute(batch, *sampling, ops));
    return {};
  }

  // One step on every local rank: local rank 0 here, the others on their threads.
  Result<StepOutput> run_step(const model::StepBatch& batch, const cache::CacheOps& ops,
                              const SamplingBatch* sampling) {
    {
      std::lock_guard lock(mu_);
      batch_ = &batch;
      ops_ = &ops;
      pending_ = int(ranks_.size()) - 1;
      ++generation_;
    }
    step_cv_.notify_all();
    StepOutput out;
    const Status mine = guarded([&] { return run_rank(0, batch, ops, sampling, &out); });
    bool first = false;
    if (!mine.ok()) {  // frees the ranks waiting in a collective
      first = world_failures_++ == 0;
      world_->fail(first_rank_, mine.to_string());
    }
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    // The first rank that failed of its own accord is the cause; the others report its failure.
    if (!mine.ok() && first) return broken_ = named(0, mine);
    for (size_t r = 1; r < ranks_.size(); ++r)
      if (!worker_status_[r].ok() && worker_failed_first_[r]) return broken_ = named(r, worker_status_[r]);
    if (!mine.ok()) return broken_ = named(0, mine);
    return out;
  }

  Status named(size_t i, const Status& st) const {
    return Status(st.code(), fmt::format("rank {}: {}", first_rank_ + int(i), st.message()));
  }

  [[noreturn]] void end_job(const Status& st) { runner::end_job(*link_, st); }

  void worker_loop(int r) {
    Rank& rank = ranks_[size_t(r)];
    if (Status st = rank.runner->bind_thread(); !st.ok()) world_->fail(first_rank_ + r, st.to_string());
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
      Status st = guarded([&] { return run_rank(size_t(r), *batch, *ops, nullptr, nullptr); });
      // A rank that fails before any other has is the cause; it ends the others' waits.
      bool first = false;
      if (!st.ok()) {
        first = world_failures_++ == 0;
        world_->fail(first_rank_ + r, st.to_string());
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
  int first_rank_;
  dist::ProcessLink* link_;
  FaultInjection fault_;
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
Status first_cause(const std::vector<Status>& statuses, int first_rank) {
  const Status* echo = nullptr;
  for (size_t r = 0; r < statuses.size(); ++r) {
    const Status& s = statuses[r];
    if (s.ok()) continue;
    if (s.message().find("failed: ") == std::string::npos)
      return Status(s.code(), fmt::format("rank {}: {}", first_rank + int(r), s.message()));
    if (!echo) echo = &s;
  }
  return echo ? *echo : Status{};
}

// Start-up across processes. The leader gathers every process's report (its own first) and answers every
// worker with the verdict: the first failure in rank order, else the smallest block count; with
// `plans_must_match`, a process whose plan differs from the leader's is the failure. A worker sends its
// report and returns the verdict.
Result<SetupVerdict> agree(dist::ProcessLink& link, const SetupReport& mine, bool plans_must_match,
                           int ranks_per_process) {
  if (!link.is_leader()) {
    RILL_TRY(link.send(0, dist::LinkTag::Report, encode_setup_report(mine)));
    RILL_ASSIGN_OR_RETURN(dist::LinkMessage m, link.receive(0));
    if (m.tag == dist::LinkTag::Shutdown)
      return Status(StatusCode::Cancelled, "the leader process stopped during start-up");
    if (m.tag != dist::LinkTag::Verdict)
      return internal_error("a {} message from the leader during start-up", dist::link_tag_name(m.tag));
    return decode_setup_verdict(m.bytes);
  }
  std::vector<SetupReport> reports{mine};
  for (int p = 1; p < link.n_processes(); ++p) {
    RILL_ASSIGN_OR_RETURN(dist::LinkMessage m, link.receive(p));
    if (m.tag != dist::LinkTag::Report)
      return internal_error("process {} sent a {} message during start-up", p, dist::link_tag_name(m.tag));
    RILL_ASSIGN_OR_RETURN(SetupReport r, decode_setup_report(m.bytes));
    reports.push_back(std::move(r));
  }
  SetupVerdict v;
  v.n_blocks = mine.n_blocks;
  for (size_t p = 0; p < reports.size() && v.status.ok(); ++p) {
    const SetupReport& r = reports[p];
    if (!r.status.ok()) {
      v.status = r.status;
    } else if (plans_must_match && (r.n_blocks != mine.n_blocks || r.n_slots != mine.n_slots ||
                                    r.n_snapshots != mine.n_snapshots)) {
      v.status =
          internal_error("rank {} plans {} MLA blocks, {} state slots and {} snapshots, rank 0 {}, {} and {}",
                         int(p) * ranks_per_process, r.n_blocks, r.n_slots, r.n_snapshots, mine.n_blocks,
                         mine.n_slots, mine.n_snapshots);
    } else {
      v.n_blocks = std::min(v.n_blocks, r.n_blocks);
    }
  }
  RILL_TRY(link.send_to_workers(dist::LinkTag::Verdict, encode_setup_verdict(v)));
  return v;
}

// This process's ranks, set up and planned alike (with every other process's when there is a link).
Result<std::unique_ptr<ParallelExecutor>> set_up(const RankLoader& load, const ParallelOptions& p,
                                                 const RunnerOptions& o) {
  const dist::ParallelSizes& sizes = p.sizes;
  RILL_ASSIGN_OR_RETURN(const LocalRanks local, local_ranks(p));
  RunnerOptions ro = o;
  if (sizes.world > 1) ro.enforce_eager = true;  // see the header
  if (ro.host_tier_bytes > 0 && sizes.world > 1) {
    // Ranks plan their own host tiers (KDA heads split under -tp): not agreed between ranks yet.
    RILL_LOG_WARN("--kv-offloading-size: the host tier is not supported with several ranks yet; running without it");
    ro.host_tier_bytes = 0;
  }
  if (!ro.disk_tier.dir.empty()) {
    // Its reads come through the Executor (load_from_disk), which only the local executor forwards yet.
    RILL_LOG_WARN("--kv-offloading-dir {}: the disk tier runs with a single rank only yet; running without it",
                  ro.disk_tier.dir.string());
    ro.disk_tier.dir.clear();
  }
  backend::CommWorldOptions co = p.comm;
  co.first_rank = local.first;
  std::vector<Rank> ranks(static_cast<size_t>(local.count));
  std::vector<Status> statuses(ranks.size());
  std::vector<std::thread> threads;
  auto world = backend::CommWorld::make(sizes.world, co);
  Status cause = world.status();
  if (cause.ok()) {
    for (int i = 0; i < local.count; ++i)
      threads.emplace_back([&, i] {
        const int r = local.first + i;
        bool joined = false;  // the rank has made its communicators (the collectives other ranks wait in)
        auto setup = [&]() -> Status {
          RILL_ASSIGN_OR_RETURN(dist::Mapping mapping, dist::Mapping::make(sizes, r));
          Rank& rank = ranks[size_t(i)];
          RILL_ASSIGN_OR_RETURN(rank.be, (*world)->make_backend(r));
          // Every rank makes its groups in the same order (tp, then pp): NCCL's and MPI's are collective over
          // the world.
          if (sizes.tp > 1) {
            RILL_ASSIGN_OR_RETURN(rank.tp_comm,
                                  (*world)->communicator(r, mapping.group(dist::GroupKind::Tp), *rank.be));
          }
          if (sizes.pp > 1) {
            RILL_ASSIGN_OR_RETURN(rank.pp_comm,
                                  (*world)->communicator(r, mapping.group(dist::GroupKind::Pp), *rank.be));
          }
          joined = true;
          if (p.fault.rank == r && p.fault.at_step == 0)
            return internal_error("fault injected at load (RILL_FAULT_INJECTION)");
          RILL_ASSIGN_OR_RETURN(auto model,
                                load(*rank.be, model::ModelShard::from_mapping(mapping, rank.tp_comm.get(),
                                                                               rank.pp_comm.get())));
          // The draft before the rank plans its caches, as on one rank (make_local_executor).
          if (r == 0 && !o.draft.dir.empty()) {
            RILL_ASSIGN_OR_RETURN(rank.draft, DraftProposer::create(*rank.be, o, model->config().vocab_size));
          }
          RILL_ASSIGN_OR_RETURN(rank.runner, ModelRunner::create(std::move(model), ro));
          return {};
        };
        statuses[size_t(i)] = guarded(setup);
        if (statuses[size_t(i)].ok()) return;
        // Ranks in other processes may wait for this one in a communicator's making (MPI_Comm_split, NCCL's
        // init), which nothing can end from here: the job ends. A failure after that is agreed on below.
        if (p.link != nullptr && !joined)
          end_job(*p.link, Status(statuses[size_t(i)].code(),
                                  fmt::format("rank {}: {}", r, statuses[size_t(i)].message())));
        (*world)->fail(r, statuses[size_t(i)].to_string());
      });
    for (auto& t : threads) t.join();
    cause = first_cause(statuses, local.first);
  }
  // Ids are global: every rank must have the same blocks and slots. Ranks may plan different block counts
  // (pipeline stages hold different layers; ranks sharing a GPU see what the others took): capacity is the
  // minimum, so every rank's caches are planned again with that many blocks.
  int min_blocks = 0;
  if (cause.ok()) {
    min_blocks = ranks[0].runner->memory_plan().n_blocks;
    for (const Rank& rank : ranks) min_blocks = std::min(min_blocks, rank.runner->memory_plan().n_blocks);
  }
  if (p.link != nullptr) {
    RILL_ASSIGN_OR_RETURN(SetupVerdict v, agree(*p.link, {cause, min_blocks}, false, local.count));
    RILL_TRY(v.status);
    min_blocks = v.n_blocks;
  }
  RILL_TRY(cause);
  bool differ = false;
  for (const Rank& rank : ranks) differ = differ || rank.runner->memory_plan().n_blocks != min_blocks;
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
      return first_cause(statuses, local.first);
    };
    cause = on_each_rank([&](size_t r) {  // every rank's caches go first, then each plans again
      models[r] = ranks[r].runner->release_model();
      ranks[r].runner.reset();
      return Status{};
    });
    if (cause.ok()) {
      cause = on_each_rank([&](size_t r) -> Status {
        RILL_ASSIGN_OR_RETURN(ranks[r].runner, ModelRunner::create(std::move(models[r]), same));
        return {};
      });
    }
  }
  SetupReport planned{cause};
  if (cause.ok()) {
    const cache::MemoryPlan& lead = ranks[0].runner->memory_plan();
    planned = {cause, lead.n_blocks, lead.n_slots, lead.n_snapshots};
    for (size_t r = 1; r < ranks.size() && planned.status.ok(); ++r) {
      const cache::MemoryPlan& mine = ranks[r].runner->memory_plan();
      if (mine.n_blocks != lead.n_blocks || mine.n_slots != lead.n_slots ||
          mine.n_snapshots != lead.n_snapshots)
        planned.status = internal_error(
            "rank {} plans {} MLA blocks, {} state slots and {} snapshots, rank {} {}, {} and {}",
            local.first + int(r), mine.n_blocks, mine.n_slots, mine.n_snapshots, local.first, lead.n_blocks,
            lead.n_slots, lead.n_snapshots);
    }
  }
  if (p.link != nullptr) {
    RILL_ASSIGN_OR_RETURN(SetupVerdict v, agree(*p.link, planned, true, local.count));
    RILL_TRY(v.status);
  }
  RILL_TRY(planned.status);
  if (local.first == 0) {
    RILL_LOG_INFO("{} ranks ({} communicators{}): {}", sizes.world, backend::comm_kind_name(p.comm.kind),
                  p.link == nullptr ? ""
                                    : fmt::format(", {} processes of {} rank{}", p.link->n_processes(),
                                                  local.count, local.count == 1 ? "" : "s"),
                  ranks[0].runner->model().shard().describe());
  }
  auto exec = std::make_unique<ParallelExecutor>(std::move(world).value(), std::move(ranks), local.first,
                                                 p.link, p.fault);
  exec->start();
  return exec;
}

}  // namespace

Result<LocalRanks> local_ranks(const ParallelOptions& p) {
  const dist::ParallelSizes& sizes = p.sizes;
  if (sizes.dp != 1 || sizes.world != sizes.tp * sizes.pp)
    return unimplemented("data parallelism is not built yet (world {} = tp {} x pp {} x dp {})", sizes.world,
                         sizes.tp, sizes.pp, sizes.dp);
  if (p.link == nullptr) return LocalRanks{0, sizes.world};
  const int n = p.link->n_processes();
  if (sizes.world % n != 0)
    return invalid_argument(
        "{} ranks (--tensor-parallel-size {} x --pipeline-parallel-size {}) do not divide over the {} "
        "processes "
        "of this job (mpirun -np): each process holds the same number of ranks",
        sizes.world, sizes.tp, sizes.pp, n);
  return LocalRanks{p.link->process() * (sizes.world / n), sizes.world / n};
}

Result<std::unique_ptr<Executor>> make_parallel_executor(const RankLoader& load, const ParallelOptions& p,
                                                         const RunnerOptions& o) {
  if (p.link != nullptr) {
    if (!p.link->is_leader())
      return internal_error(
          "make_parallel_executor runs in the leader process; process {} runs "
          "run_parallel_worker",
          p.link->process());
    RILL_TRY(p.link->send_to_workers(dist::LinkTag::Options, encode_runner_options(o)));
  }
  RILL_ASSIGN_OR_RETURN(std::unique_ptr<ParallelExecutor> exec, set_up(load, p, o));
  return std::unique_ptr<Executor>(std::move(exec));
}

Status run_parallel_worker(const RankLoader& load, const ParallelOptions& p) {
  if (p.link == nullptr || p.link->is_leader())
    return internal_error("run_parallel_worker runs in a worker process of an mpirun job");
  RILL_ASSIGN_OR_RETURN(dist::LinkMessage m, p.link->receive(0));
  if (m.tag == dist::LinkTag::Shutdown) return {};  // the leader stopped before setting up (it says why)
  if (m.tag != dist::LinkTag::Options)
    return internal_error("a {} message from the leader where the runner options were due",
                          dist::link_tag_name(m.tag));
  RILL_ASSIGN_OR_RETURN(RunnerOptions o, decode_runner_options(m.bytes));
  auto exec = set_up(load, p, o);
  if (!exec.ok() && exec.status().code() == StatusCode::Cancelled) return {};
  RILL_TRY(exec.status());
  RILL_TRY((*exec)->bind_thread());
  return (*exec)->serve_steps();
}

}  // namespace rill::runner
