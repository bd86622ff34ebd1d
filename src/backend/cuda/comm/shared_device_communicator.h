// SharedDeviceCommHub: several ranks on ONE GPU (threads of one process, each with its own stream), so the
// sharded CUDA path can be tested on a single device — NCCL refuses two ranks on the same GPU. No CUDA types
// here: streams travel as void* (cudaStream_t).
//
// A collective meets on the host (dist/thread_rendezvous.h, deadlines included) only to exchange pointers
// and events: each rank's stream waits for the others' "inputs ready" events, does its part with device
// copies and the rank-order sum kernel (fp32 in rank order, rounded once: the thread communicator's values
// bit for bit), records "read done", and waits for everyone's before it writes its outputs or reuses its
// inputs. No host sync except in barrier(). Point-to-point: a send waits on the host for its recv, as NCCL's
// does (order a ring's sends and recvs by parity, or it deadlocks until the timeout).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/thread_rendezvous.h"

namespace rill::cuda {

struct SharedDeviceCommOptions {
  std::chrono::milliseconds timeout{120000};
};

class SharedDeviceCommHub : public std::enable_shared_from_this<SharedDeviceCommHub> {
 public:
  static Result<std::shared_ptr<SharedDeviceCommHub>> make(int world_size, int device,
                                                           SharedDeviceCommOptions options = {});
  ~SharedDeviceCommHub();

  // A communicator for `world_rank` over `group` (ascending world ranks, at most 16), whose device work runs
  // on `stream` (the rank's compute stream, a cudaStream_t on this hub's device).
  Result<std::unique_ptr<dist::Communicator>> communicator(int world_rank, const std::vector<int>& group,
                                                           void* stream);

  void fail(int world_rank, const std::string& reason) { rendezvous_->fail(world_rank, reason); }
  Status status() const { return rendezvous_->status(); }
  int device() const { return device_; }

  struct Slot;  // one member's events, owned here so no peer ever waits on a destroyed event

 private:
  SharedDeviceCommHub(std::shared_ptr<dist::ThreadRendezvous> r, int device);
  std::shared_ptr<dist::ThreadRendezvous> rendezvous_;
  int device_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace rill::cuda
