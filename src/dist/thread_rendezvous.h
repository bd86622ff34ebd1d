// ThreadRendezvous: the meeting point of ranks that are threads of one process — what the CPU thread
// communicator and the CUDA shared-device communicator (several ranks on one GPU) are built on.
//
// A collective is two meetings: members post what they bring (`arrive` with check: the last to arrive checks
// that all called the same operation on the same sizes), each reads the others' posts and does its part, then
// they meet again (`arrive` without check) so no post is reused while another member still reads it.
// Point-to-point messages go through per-(src, dst, tag) mailboxes.
//
// No wait is unbounded: a member that does not arrive (or send) within the timeout fails the whole world with
// a message naming it; `fail(rank, reason)` ends every wait with that reason; after a failure every call
// returns it, so a broken rank never hangs the others.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace rill::dist {

// What a member brings to a collective.
struct RendezvousPost {
  const char* op = "";
  DType dtype = DType::U8;
  int64_t numel = 0;  // checked equal across members unless the op's sizes differ by design (all_to_all_v)
  const void* in = nullptr;
  std::span<const int64_t> send_rows;
  int root = -1;
  const void* extra = nullptr;  // the implementation's (host bytes, a CUDA event)
  bool sizes_may_differ = false;
};

class ThreadRendezvous {
 public:
  struct Group;

  ThreadRendezvous(int world_size, std::chrono::milliseconds timeout, std::string name);
  ~ThreadRendezvous();

  int world_size() const { return world_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& name() const { return name_; }  // "thread communicator", for messages

  // The group of `members` (ascending world ranks containing world_rank), made on first use; *member is
  // world_rank's index in it.
  Result<Group*> group(int world_rank, const std::vector<int>& members, int* member);
  static const std::vector<int>& members(const Group& g);

  // Posts and waits until every member has arrived (see the header comment).
  Status arrive(Group& g, int member, const RendezvousPost& post, bool check);
  // Another member's post; valid between the two arrivals of a collective.
  static const RendezvousPost& post(const Group& g, int member);

  // Mailboxes: put never waits; take waits (with the deadline) for the oldest message from src.
  Status put(Group& g, int src, int dst, int tag, std::vector<uint8_t> payload);
  Result<std::vector<uint8_t>> take(Group& g, int src, int dst, int tag);

  void fail(int world_rank, const std::string& reason);
  Status status() const;

 private:
  void fail_locked(Status s);
  static Status check_posts(const Group& g);

  const int world_;
  const std::chrono::milliseconds timeout_;
  const std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Status failure_;
  std::map<std::vector<int>, std::unique_ptr<Group>> groups_;
};

}  // namespace rill::dist
