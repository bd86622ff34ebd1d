// NcclCommunicator: a Communicator over NCCL (the CUDA toolkit's), one GPU per rank, on the rank's compute
// stream. No CUDA or NCCL types here (streams travel as void*), so other folders may include it.
//
// Made from one unique id per world (rank 0 makes it; threads of one process share it directly, processes
// get it over MPI: dist/mpi_bootstrap), sub-groups by ncclCommSplit with a Mapping's group index as colour.
// NCCL_NVLS_ENABLE=0 is set before the first init (NVLink multicast must stay off on these machines).
//
// Sums: NCCL reduces in its own fixed order for a given topology (ring or tree) and every rank receives the
// same reduced bytes, so results are bit-identical across ranks and repeatable; bf16 partial sums are rounded
// at each step, so they agree with the thread communicator's round-once sums within bf16 rounding, not bit
// for bit.
//
// Errors: a failed NCCL call or an asynchronous error aborts the communicator (ncclCommAbort) and every later
// call returns that error. A rank blocked in a collective whose peer died is only freed by abort() from
// another thread (the runner's watchdog).
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "dist/communicator.h"

struct ncclComm;

namespace rill::cuda {

struct NcclUniqueId {
  std::array<char, 128> bytes{};  // ncclUniqueId (NCCL_UNIQUE_ID_BYTES)
};

// Made once per world by its rank 0.
Result<NcclUniqueId> nccl_unique_id();

class NcclCommunicator final : public dist::Communicator {
 public:
  // Rank `rank` of `world` ranks on GPU `device`, its collectives on `stream` (a cudaStream_t). Every rank
  // calls this at once (one thread per GPU within a process): it returns when all have joined.
  static Result<std::unique_ptr<NcclCommunicator>> make(const NcclUniqueId& id, int world, int rank,
                                                        int device, void* stream);
  ~NcclCommunicator() override;

  // The sub-communicator of the ranks that pass the same colour, ranked by key (Mapping::group_index and
  // rank_in). Every rank of this communicator must call it; its stream may differ.
  Result<std::unique_ptr<NcclCommunicator>> split(int color, int key, void* stream);

  // Ends every pending and later operation with `reason` (thread-safe: the watchdog's call).
  void abort(const std::string& reason);
  // ok, or the asynchronous error NCCL reports (which aborts the communicator).
  Status check_async();

  std::string describe() const override;

 protected:
  Status all_reduce_sum_impl(const TensorView& in, const TensorView& out) override;
  Status all_gather_impl(const TensorView& in, const TensorView& out) override;
  Status reduce_scatter_impl(const TensorView& in, const TensorView& out) override;
  Status all_to_all_v_impl(const TensorView& in, std::span<const int64_t> send_rows, const TensorView& out,
                           std::span<const int64_t> recv_rows) override;
  Status send_impl(const TensorView& in, int peer) override;
  Status recv_impl(const TensorView& out, int peer) override;
  Status broadcast_impl(const TensorView& data, int root) override;
  Status broadcast_bytes_impl(std::vector<uint8_t>& bytes, int root) override;
  Status barrier_impl() override;

 private:
  NcclCommunicator(ncclComm* comm, int rank, int size, int device, void* stream);
  Status failed(const char* call, int result);  // aborts, remembers and returns the error
  Status usable() const;
  std::string error() const;
  Status scratch(size_t nbytes);

  ncclComm* comm_;
  int device_;
  void* stream_;
  void* scratch_ = nullptr;  // device bytes for barrier and broadcast_bytes
  size_t scratch_bytes_ = 0;
  std::atomic<bool> aborted_{false};
  mutable std::mutex error_mu_;
  std::string error_;  // why it was aborted
};

}  // namespace rill::cuda
