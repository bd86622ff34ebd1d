#include "backend/comm_world.h"

#include <mutex>

#include <fmt/format.h>

#include "backend/cpu/comm/thread_communicator.h"
#include "dist/mpi_bootstrap.h"

#if RILL_HAVE_MPI
#include "backend/cpu/comm/mpi_communicator.h"
#endif

#if RILL_HAVE_CUDA
#include "backend/cuda/comm/nccl_communicator.h"
#include "backend/cuda/comm/shared_device_communicator.h"
#include "backend/cuda/make_cuda_backend.h"
#endif

namespace rill::backend {

const char* comm_kind_name(CommKind kind) {
  switch (kind) {
    case CommKind::Threads: return "threads";
    case CommKind::Nccl: return "nccl";
    case CommKind::SharedGpu: return "shared-gpu";
    case CommKind::Mpi:
      return "mpi";
  }
  return "?";
}

Result<std::unique_ptr<Backend>> CommWorld::make_backend(int rank) const {
  if (kind_ == CommKind::Threads || (kind_ == CommKind::Mpi && !mpi_gpus_)) return make_cpu_backend();
#if RILL_HAVE_CUDA
  return make_cuda_backend(gpu_of(rank), cuda_);
#else
  (void)rank;
  return unavailable("this rill was built without the CUDA backend; use --device cpu");
#endif
}

namespace {

class ThreadWorld final : public CommWorld {
 public:
  ThreadWorld(int n, const CommWorldOptions& o)
      : CommWorld(n, o), hub_(ThreadCommHub::make(n, ThreadCommOptions{o.timeout})) {}
  Result<std::unique_ptr<dist::Communicator>> communicator(int rank, const std::vector<int>& group,
                                                           Backend&) override {
    return hub_->communicator(rank, group);
  }
  void fail(int rank, const std::string& reason) override { hub_->fail(rank, reason); }

 private:
  std::shared_ptr<ThreadCommHub> hub_;
};

#if RILL_HAVE_CUDA
class SharedGpuWorld final : public CommWorld {
 public:
  SharedGpuWorld(int n, const CommWorldOptions& o, std::shared_ptr<cuda::SharedDeviceCommHub> hub)
      : CommWorld(n, o), hub_(std::move(hub)) {}
  Result<std::unique_ptr<dist::Communicator>> communicator(int rank, const std::vector<int>& group,
                                                           Backend& be) override {
    return hub_->communicator(rank, group, be.native_stream());
  }
  void fail(int rank, const std::string& reason) override { hub_->fail(rank, reason); }

 private:
  std::shared_ptr<cuda::SharedDeviceCommHub> hub_;
};

// One NCCL world from one unique id; a group other than the whole world is split from it (every rank
// splits, with the group's first member as colour).
class NcclWorld final : public CommWorld {
 public:
  NcclWorld(int n, const CommWorldOptions& o, cuda::NcclUniqueId id) : CommWorld(n, o), id_(id) {}
  Result<std::unique_ptr<dist::Communicator>> communicator(int rank, const std::vector<int>& group,
                                                           Backend& be) override {
    RILL_ASSIGN_OR_RETURN(
        auto world, cuda::NcclCommunicator::make(id_, world_size_, rank, gpu_of(rank), be.native_stream()));
    std::unique_ptr<cuda::NcclCommunicator> comm = std::move(world);
    if (int(group.size()) != world_size_) {
      int key = 0;
      while (group[size_t(key)] != rank) ++key;
      RILL_ASSIGN_OR_RETURN(comm, comm->split(group.front(), key, be.native_stream()));
    }
    std::lock_guard lock(mu_);
    made_.push_back(comm.get());
    return std::unique_ptr<dist::Communicator>(std::move(comm));
  }
  void fail(int rank, const std::string& reason) override {
    std::lock_guard lock(mu_);
    for (cuda::NcclCommunicator* c : made_) c->abort(fmt::format("rank {} failed: {}", rank, reason));
  }

 private:
  cuda::NcclUniqueId id_;
  std::mutex mu_;
  std::vector<cuda::NcclCommunicator*> made_;  // aborted by fail(); they outlive this world's users
};
#endif

#if RILL_HAVE_MPI
// CPU ranks in several processes, one per process, so a world rank is its process's MPI rank: a group is the
// MPI communicator split from the world with the group's first member as colour. A failed rank cannot free
// the others' MPI waits from here: its process ends the job (runner/parallel_executor).
class MpiCpuWorld final : public CommWorld {
 public:
  MpiCpuWorld(int n, const CommWorldOptions& o) : CommWorld(n, o) {}
  Result<std::unique_ptr<dist::Communicator>> communicator(int rank, const std::vector<int>& group,
                                                           Backend&) override {
    int key = 0;
    while (key < int(group.size()) && group[size_t(key)] != rank) ++key;
    if (key == int(group.size())) return invalid_argument("rank {} is not in its own group", rank);
    return make_mpi_communicator(group.front(), key);
  }
  void fail(int, const std::string&) override {}
};
#endif

// Ranks in several processes: the MPI world must hold this world's ranks, a process's ranks consecutive.
Result<std::unique_ptr<CommWorld>> make_mpi_world(int n, const CommWorldOptions& o) {
#if RILL_HAVE_MPI
  RILL_ASSIGN_OR_RETURN(dist::MpiWorld mpi, dist::mpi_init());
  if (!o.mpi_gpus) {
    if (mpi.size != n || o.first_rank != mpi.rank)
      return invalid_argument(
          "CPU ranks in several processes run one rank per process: {} ranks need mpirun -np {} (this job "
          "has "
          "{} processes)",
          n, n, mpi.size);
    return std::unique_ptr<CommWorld>(new MpiCpuWorld(n, o));
  }
#if RILL_HAVE_CUDA
  // The first process makes NCCL's unique id; every process joins the world with it.
  std::vector<uint8_t> bytes;
  if (mpi.rank == 0) {
    RILL_ASSIGN_OR_RETURN(cuda::NcclUniqueId made, cuda::nccl_unique_id());
    bytes.assign(made.bytes.begin(), made.bytes.end());
  }
  RILL_TRY(dist::mpi_broadcast_bytes(bytes, 0));
  cuda::NcclUniqueId id;
  if (bytes.size() != id.bytes.size())
    return internal_error("the NCCL unique id broadcast over MPI has {} bytes, not {}", bytes.size(),
                          id.bytes.size());
  std::copy(bytes.begin(), bytes.end(), id.bytes.begin());
  return std::unique_ptr<CommWorld>(new NcclWorld(n, o, id));
#else
  return unavailable("GPU ranks need the CUDA backend, and this rill was built without it");
#endif
#else
  (void)n;
  (void)o;
  return unimplemented(
      "ranks in several processes need MPI, and this rill was built without it (install "
      "libopenmpi-dev, scripts/setup.sh, and re-run cmake)");
#endif
}

}  // namespace

Result<std::unique_ptr<CommWorld>> CommWorld::make(int n, const CommWorldOptions& o) {
  if (n < 1) return invalid_argument("a world needs at least one rank (got {})", n);
  switch (o.kind) {
    case CommKind::Threads: return std::unique_ptr<CommWorld>(new ThreadWorld(n, o));
    case CommKind::Mpi:
      return make_mpi_world(n, o);
    case CommKind::SharedGpu:
    case CommKind::Nccl: {
#if RILL_HAVE_CUDA
      if (o.kind == CommKind::SharedGpu) {
        RILL_ASSIGN_OR_RETURN(auto hub,
                              cuda::SharedDeviceCommHub::make(n, o.first_gpu, cuda::SharedDeviceCommOptions{o.timeout}));
        return std::unique_ptr<CommWorld>(new SharedGpuWorld(n, o, std::move(hub)));
      }
      RILL_ASSIGN_OR_RETURN(cuda::NcclUniqueId id, cuda::nccl_unique_id());
      return std::unique_ptr<CommWorld>(new NcclWorld(n, o, id));
#else
      return unavailable("{} ranks need the CUDA backend, and this rill was built without it", comm_kind_name(o.kind));
#endif
    }
  }
  return internal_error("unknown communicator kind");
}

}  // namespace rill::backend
