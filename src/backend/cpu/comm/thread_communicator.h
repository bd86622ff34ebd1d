// ThreadCommHub: the ranks of one world as threads of one process (the CPU backend's communicator, so CI runs
// every sharding on two cores). One hub per world; each rank makes a communicator per group it belongs to
// (a Mapping's groups), and every member of a group must make one for the same member list.
//
// No wait is unbounded: a rank that does not reach a collective (or a recv's message) within the timeout
// fails the whole hub with a message naming the missing rank, and a rank that fails (`fail`) ends every wait
// of the others with its reason. After a failure every call on the hub returns that error.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace rill::backend::cpu {

struct ThreadCommOptions {
  std::chrono::milliseconds timeout{120000};  // per wait; a step of a large CPU model can take seconds
};

class ThreadCommHub : public std::enable_shared_from_this<ThreadCommHub> {
 public:
  static std::shared_ptr<ThreadCommHub> make(int world_size, ThreadCommOptions options = {});
  ~ThreadCommHub();

  // A communicator for `world_rank` over `group` (world ranks, ascending, containing world_rank). Its rank is
  // world_rank's position in the list.
  Result<std::unique_ptr<dist::Communicator>> communicator(int world_rank, const std::vector<int>& group);

  // Ends every wait, now and later, with "rank N failed: reason" (a rank's thread that errors calls this).
  void fail(int world_rank, const std::string& reason);
  Status status() const;  // ok, or the failure every call now returns
  int world_size() const;

  struct State;  // shared with the communicators

 private:
  explicit ThreadCommHub(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace rill::backend::cpu
