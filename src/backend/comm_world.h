// CommWorld: the communicators of a world whose ranks are threads of this process (issue #17), whatever the
// device: the thread communicator on the CPU, NCCL with one GPU per rank, or the shared-device communicator
// when the ranks share one GPU (the sharded CUDA path tested on a single device). Each rank's thread asks
// for its communicators with its own backend, so the collectives run on that backend's stream.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "dist/communicator.h"

namespace rill::backend {

enum class CommKind {
  Threads,     // CPU backends: backend/cpu/comm/thread_communicator
  Nccl,        // CUDA, rank r on GPU first_gpu + r: backend/cuda/comm/nccl_communicator
  SharedGpu,   // CUDA, every rank on GPU first_gpu: backend/cuda/comm/shared_device_communicator
};
const char* comm_kind_name(CommKind kind);

struct CommWorldOptions {
  CommKind kind = CommKind::Threads;
  int first_gpu = 0;
  std::chrono::milliseconds timeout{120000};  // per wait (threads, shared GPU); NCCL waits are not bounded
};

class CommWorld {
 public:
  virtual ~CommWorld() = default;
  static Result<std::unique_ptr<CommWorld>> make(int world_size, const CommWorldOptions& options);

  int world_size() const { return world_size_; }
  CommKind kind() const { return kind_; }
  // The backend of rank r (made on the calling thread, which it binds): CPU, or the rank's GPU.
  Result<std::unique_ptr<Backend>> make_backend(int rank) const;
  // Rank r's communicator over `group` (ascending world ranks), its work on `be`'s stream. Every member of
  // the group calls it, each from its own thread (NCCL returns once all have joined).
  virtual Result<std::unique_ptr<dist::Communicator>> communicator(int rank, const std::vector<int>& group,
                                                                   Backend& be) = 0;
  // Ends every wait of every rank, now and later, with an error naming `rank` and `reason`.
  virtual void fail(int rank, const std::string& reason) = 0;

 protected:
  CommWorld(int world_size, const CommWorldOptions& o) : world_size_(world_size), kind_(o.kind), first_gpu_(o.first_gpu) {}
  int world_size_;
  CommKind kind_;
  int first_gpu_;
};

}  // namespace rill::backend
