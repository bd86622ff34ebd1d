// CommWorld: the communicators of a world of ranks (issue #17), whatever the device: ranks that are threads
// of this process talk through the thread communicator on the CPU, NCCL with one GPU per rank, or the
// shared-device communicator when the ranks share one GPU (the sharded CUDA path tested on a single device);
// ranks in several processes (mpirun) through MPI on the CPU or NCCL on GPUs. Each rank's thread asks for its
// communicators with its own backend, so the collectives run on that backend's stream.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda_backend_options.h"
#include "dist/communicator.h"

namespace rill::backend {

enum class CommKind {
  Threads,    // CPU backends: backend/cpu/comm/thread_communicator
  Nccl,       // CUDA, rank r on GPU first_gpu + r: backend/cuda/comm/nccl_communicator
  SharedGpu,  // CUDA, every rank on GPU first_gpu: backend/cuda/comm/shared_device_communicator
  // Ranks in several processes (mpirun; dist::mpi_init first). On the CPU one rank per process, through
  // backend/cpu/comm/mpi_communicator; with `mpi_gpus` the ranks of a process each have a GPU and talk
  // through NCCL, from a unique id the first process makes and broadcasts over MPI.
  Mpi,
};
const char* comm_kind_name(CommKind kind);

struct CommWorldOptions {
  CommKind kind = CommKind::Threads;
  int first_gpu = 0;
  std::chrono::milliseconds timeout{120000};  // per wait (threads, shared GPU); NCCL waits are not bounded
  // CommKind::Mpi: this process holds the world ranks from first_rank on; rank r runs on GPU
  // first_gpu + r - first_rank when mpi_gpus, else on the CPU.
  int first_rank = 0;
  bool mpi_gpus = false;
  // The options of every rank's CUDA backend (`--backend-option`), as the single-GPU backend gets them.
  CudaBackendOptions cuda;
};

class CommWorld {
 public:
  virtual ~CommWorld() = default;
  static Result<std::unique_ptr<CommWorld>> make(int world_size, const CommWorldOptions& options);

  int world_size() const { return world_size_; }
  CommKind kind() const { return kind_; }
  // The backend of rank r (made on the calling thread, which it binds): CPU, or the rank's GPU. Under
  // CommKind::Mpi only this process's ranks.
  Result<std::unique_ptr<Backend>> make_backend(int rank) const;
  // Rank r's communicator over `group` (ascending world ranks), its work on `be`'s stream. Every member of
  // the group calls it, each from its own thread (NCCL returns once all have joined).
  virtual Result<std::unique_ptr<dist::Communicator>> communicator(int rank, const std::vector<int>& group,
                                                                   Backend& be) = 0;
  // Ends every wait of every rank, now and later, with an error naming `rank` and `reason`.
  virtual void fail(int rank, const std::string& reason) = 0;

 protected:
  CommWorld(int world_size, const CommWorldOptions& o)
      : world_size_(world_size),
        kind_(o.kind),
        first_gpu_(o.first_gpu),
        first_rank_(o.first_rank),
        mpi_gpus_(o.mpi_gpus),
        cuda_(o.cuda) {}
  // The GPU of world rank r: one per rank of this process from first_gpu on (NCCL, MPI), or all on first_gpu.
  int gpu_of(int rank) const {
    return kind_ == CommKind::SharedGpu ? first_gpu_ : first_gpu_ + rank - first_rank_;
  }
  int world_size_;
  CommKind kind_;
  int first_gpu_;
  int first_rank_;
  bool mpi_gpus_;
  CudaBackendOptions cuda_;
};

}  // namespace rill::backend
