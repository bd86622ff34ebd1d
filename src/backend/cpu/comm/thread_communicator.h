// ThreadCommHub: the ranks of one world as threads of one process (the CPU backend's communicator, so CI runs
// every sharding on two cores). One hub per world; each rank makes a communicator per group it belongs to
// (a Mapping's groups), and every member of a group must make one for the same member list.
//
// No wait is unbounded (dist/thread_rendezvous.h): a rank that does not reach a collective (or send a recv's
// message) within the timeout fails the hub naming it, and `fail` ends every wait with the failed rank's
// reason. After a failure every call on the hub returns that error.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/thread_rendezvous.h"

namespace rill::backend {

struct ThreadCommOptions {
  std::chrono::milliseconds timeout{120000};  // per wait; a step of a large CPU model can take seconds
};

class ThreadCommHub {
 public:
  static std::shared_ptr<ThreadCommHub> make(int world_size, ThreadCommOptions options = {});

  // A communicator for `world_rank` over `group` (world ranks, ascending, containing world_rank). Its rank is
  // world_rank's position in the list.
  Result<std::unique_ptr<dist::Communicator>> communicator(int world_rank, const std::vector<int>& group);

  // Ends every wait, now and later, with "rank N failed: reason" (a rank's thread that errors calls this).
  void fail(int world_rank, const std::string& reason) { rendezvous_->fail(world_rank, reason); }
  Status status() const { return rendezvous_->status(); }  // ok, or the failure every call now returns
  int world_size() const { return rendezvous_->world_size(); }

 private:
  explicit ThreadCommHub(std::shared_ptr<dist::ThreadRendezvous> r) : rendezvous_(std::move(r)) {}
  std::shared_ptr<dist::ThreadRendezvous> rendezvous_;
};

}  // namespace rill::backend
