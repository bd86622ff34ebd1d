// Communicator: the collectives one group of ranks runs together (design.md §8, spec/parallelism.md §5).
//
// Every member calls the same operations in the same order; a call returns when this rank's part is done (a
// CUDA communicator: when the work is queued on the stream it was made with, the rank's compute stream, so a
// collective is ordered after the kernels that produce its input without a host sync).
//
// Determinism: a sum is accumulated in fp32 in rank order (rank 0's value, + rank 1's, + ...) and rounded
// once to the tensor's dtype, so every rank gets bit-identical values and a run is repeatable. The thread and
// shared-device communicators follow that order exactly; NCCL reduces in its own (fixed, topology-dependent)
// order and rounds bf16 partial sums, so its values are identical on every rank and within bf16 rounding of
// the others (NcclCommunicator says more).
//
// Tensors are contiguous views on the communicator's device(); sums take F32 or BF16, data movement any
// dtype. Row-wise operations (all_gather, reduce_scatter, all_to_all_v) split dimension 0.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace rill::dist {

class Communicator {
 public:
  Communicator(int rank, int size, Device device) : rank_(rank), size_(size), device_(device) {}
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }  // within the group, 0..size()-1
  int size() const { return size_; }
  Device device() const { return device_; }
  virtual std::string describe() const = 0;  // for messages: "thread communicator, rank 1 of group [2, 3]"

  // out = the sum over ranks of in (same shape, dtype F32 or BF16); out may be in.
  Status all_reduce_sum(const TensorView& in, const TensorView& out);
  // out = every rank's in, rank 0's rows first: out.size(0) = size() * in.size(0). in may be this rank's
  // slice of out.
  Status all_gather(const TensorView& in, const TensorView& out);
  // out = this rank's rows of the sum: rows [rank * m, (rank + 1) * m) where m = out.size(0) = in.size(0) /
  // size().
  Status reduce_scatter(const TensorView& in, const TensorView& out);
  // in holds send_rows[0] rows for rank 0, then send_rows[1] for rank 1, ...; out receives recv_rows[j] rows
  // from each rank j in rank order. recv_rows[j] must equal rank j's send_rows[rank()] (exchange the counts
  // first, e.g. with an all_gather). in and out must not overlap.
  Status all_to_all_v(const TensorView& in, std::span<const int64_t> send_rows, const TensorView& out,
                      std::span<const int64_t> recv_rows);
  // Point to point: peer's recv of the same size matches this send (in call order per pair).
  Status send(const TensorView& in, int peer);
  Status recv(const TensorView& out, int peer);
  // data (same shape on every rank) takes root's values.
  Status broadcast(const TensorView& data, int root);
  // Host bytes of any length (the leader's step plan): every rank's `bytes` becomes root's.
  Status broadcast_bytes(std::vector<uint8_t>& bytes, int root);
  Status barrier();

 protected:
  virtual Status all_reduce_sum_impl(const TensorView& in, const TensorView& out) = 0;
  virtual Status all_gather_impl(const TensorView& in, const TensorView& out) = 0;
  virtual Status reduce_scatter_impl(const TensorView& in, const TensorView& out) = 0;
  virtual Status all_to_all_v_impl(const TensorView& in, std::span<const int64_t> send_rows,
                                   const TensorView& out, std::span<const int64_t> recv_rows) = 0;
  virtual Status send_impl(const TensorView& in, int peer) = 0;
  virtual Status recv_impl(const TensorView& out, int peer) = 0;
  virtual Status broadcast_impl(const TensorView& data, int root) = 0;
  virtual Status broadcast_bytes_impl(std::vector<uint8_t>& bytes, int root) = 0;
  virtual Status barrier_impl() = 0;

 private:
  Status check_tensor(const char* op, const char* name, const TensorView& t) const;
  Status check_peer(const char* op, const char* name, int peer) const;

  int rank_;
  int size_;
  Device device_;
};

// Elements per row of dimension 0 (1 for a rank-1 tensor), bytes per row.
int64_t row_elements(const TensorView& t);
size_t row_bytes(const TensorView& t);

}  // namespace rill::dist
