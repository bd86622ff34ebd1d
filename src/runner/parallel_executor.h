// ParallelExecutor: the ranks of a tensor/expert/pipeline-parallel world run in lockstep (issue #17,
// design.md §4, ../shared/spec/parallelism.md §6). Each rank has its backend, its communicators and a
// ModelRunner over its shard of the model; the engine thread drives rank 0 (the leader: its caches' ids are
// every rank's, it samples — under pipeline parallelism with the logits the last stage sends it) and hands
// each step's batch and cache operations to the other ranks, which run the same step without sampling. Block
// and slot ids are the same on every rank, so the ranks' memory plans must agree.
//
// The ranks are threads of this process, or (ParallelOptions::link, mpirun) of several processes: each
// process holds world / processes consecutive ranks as threads. The leader process (MPI rank 0) makes the
// executor, sends every worker process the runner options, then each step (runner/wire_format); a worker
// process runs run_parallel_worker instead of the server. Start-up is agreed: every process reports its
// ranks' setup (an error naming the rank, or its cache plan), and the leader answers go (with the smallest
// block count, which every rank plans) or stop.
//
// Failures: within a process, a rank whose load or step fails ends every other rank's waits through the
// world (CommWorld::fail) with an error naming it; the executor then answers every later step with that
// error instead of hanging. Across processes a rank stuck in an MPI wait cannot be freed, so a failed step —
// or a setup failure before the rank's communicators exist, which the others wait for — ends the whole job
// (ProcessLink::abort_job) after its process has logged the failure naming the rank; a process that dies is
// reported by mpirun, which ends the job. A load that fails later is agreed on: the server reports it.
// Decode graphs are off with more than one rank (every rank would have to capture its collectives together).
#pragma once

#include <functional>
#include <memory>

#include "backend/comm_world.h"
#include "dist/mapping.h"
#include "dist/process_link.h"
#include "runner/executor.h"

namespace rill::runner {

// How one rank gets its model: its backend and its shard (which points at the rank's communicator).
using RankLoader = std::function<Result<std::unique_ptr<model::Model>>(backend::Backend& be,
                                                                       const model::ModelShard& shard)>;

// Tests: one rank fails on purpose — its load (at_step 0) or its at_step-th step (an exception thrown where
// the step runs) — to show that the others end with an error naming it instead of hanging.
struct FaultInjection {
  int rank = -1;  // -1: none
  int at_step = 0;
};

struct ParallelOptions {
  dist::ParallelSizes sizes;       // world = tp x pp (dp = 1 for now)
  backend::CommWorldOptions comm;  // threads (CPU), NCCL (a GPU per rank), ranks sharing one GPU, or MPI
  // Ranks in several processes (comm.kind Mpi): the link between this process and the others; null when
  // every rank is a thread of this process.
  dist::ProcessLink* link = nullptr;
  FaultInjection fault;
};

// The world ranks this process holds: all of them, or under a link its consecutive share (the world must
// divide by the number of processes; the message names the flags and -np).
struct LocalRanks {
  int first = 0, count = 1;
};
Result<LocalRanks> local_ranks(const ParallelOptions& p);

// Makes the world, every local rank's backend, communicator and model (loaded concurrently) and runner. Under
// a link: the leader process's part (world rank 0 and its process's other ranks), after which every step also
// goes to the worker processes.
Result<std::unique_ptr<Executor>> make_parallel_executor(const RankLoader& load, const ParallelOptions& p,
                                                         const RunnerOptions& o);

// What a worker process (not the leader's) runs: waits for the leader's runner options, sets up its ranks,
// then runs the steps it receives until the leader shuts it down (ok). A setup error is returned (the leader
// names it too); a step that fails ends the job.
Status run_parallel_worker(const RankLoader& load, const ParallelOptions& p);

}  // namespace rill::runner
