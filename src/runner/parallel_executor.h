// ParallelExecutor: the ranks of a tensor/expert/pipeline-parallel world that are threads of this process, run
// in lockstep (issue #17, design.md §4, ../shared/spec/parallelism.md §6). Each rank has its backend, its
// communicators and a ModelRunner over its shard of the model; the engine thread drives rank 0 (the leader:
// its caches' ids are every rank's, it samples — under pipeline parallelism with the logits the last stage
// sends it) and hands each step's batch and cache operations to the other ranks' threads, which run the same
// step without sampling. Block and slot ids are the same on every rank,
// so the ranks' memory plans must agree.
//
// Failures: a rank whose load or step fails ends every other rank's waits through the world (CommWorld::fail)
// with an error naming it; the executor then answers every later step with that error instead of hanging.
// Decode graphs are off with more than one rank (every rank would have to capture its collectives together).
#pragma once

#include <functional>
#include <memory>

#include "backend/comm_world.h"
#include "dist/mapping.h"
#include "runner/executor.h"

namespace rill::runner {

// How one rank gets its model: its backend and its shard (which points at the rank's communicator).
using RankLoader =
    std::function<Result<std::unique_ptr<model::Model>>(backend::Backend& be, const model::ModelShard& shard)>;

struct ParallelOptions {
  dist::ParallelSizes sizes;     // world = tp x pp (dp = 1 for now)
  backend::CommWorldOptions comm;  // threads (CPU), NCCL (a GPU per rank) or ranks sharing one GPU
};

// Makes the world, every rank's backend, communicator and model (loaded concurrently) and runner.
Result<std::unique_ptr<Executor>> make_parallel_executor(const RankLoader& load, const ParallelOptions& p,
                                                         const RunnerOptions& o);

}  // namespace rill::runner
