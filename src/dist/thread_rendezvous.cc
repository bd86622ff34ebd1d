#include "dist/thread_rendezvous.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace rill::dist {

struct ThreadRendezvous::Group {
  std::vector<int> members;  // world ranks
  std::vector<RendezvousPost> posts;
  std::vector<uint64_t> arrived;  // the generation each member last arrived for
  uint64_t generation = 0;
  int count = 0;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<uint8_t>>> mailbox;  // (src, dst, tag)
};

ThreadRendezvous::ThreadRendezvous(int world_size, std::chrono::milliseconds timeout, std::string name)
    : world_(world_size), timeout_(timeout), name_(std::move(name)) {}
ThreadRendezvous::~ThreadRendezvous() = default;

Result<ThreadRendezvous::Group*> ThreadRendezvous::group(int world_rank, const std::vector<int>& members,
                                                         int* member) {
  if (members.empty()) return invalid_argument("{}: empty group", name_);
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= world_ || (i > 0 && members[i] <= members[i - 1])) {
      return invalid_argument("{}: group [{}] is not ascending world ranks of a world of {}", name_,
                              fmt::join(members, ", "), world_);
    }
  }
  const auto it = std::find(members.begin(), members.end(), world_rank);
  if (it == members.end()) {
    return invalid_argument("{}: rank {} is not in group [{}]", name_, world_rank, fmt::join(members, ", "));
  }
  *member = int(it - members.begin());
  std::lock_guard lock(mu_);
  auto& g = groups_[members];
  if (!g) {
    g = std::make_unique<Group>();
    g->members = members;
    g->posts.resize(members.size());
    g->arrived.resize(members.size());
  }
  return g.get();
}

const std::vector<int>& ThreadRendezvous::members(const Group& g) {
  return g.members;
}
const RendezvousPost& ThreadRendezvous::post(const Group& g, int member) {
  return g.posts[member];
}

void ThreadRendezvous::fail_locked(Status s) {
  if (failure_.ok()) failure_ = std::move(s);
  cv_.notify_all();
}

Status ThreadRendezvous::arrive(Group& g, int member, const RendezvousPost& post, bool check) {
  std::unique_lock lock(mu_);
  if (!failure_.ok()) return failure_;
  if (check) g.posts[member] = post;
  const uint64_t gen = g.generation;
  g.arrived[member] = gen + 1;
  if (++g.count == int(g.members.size())) {
    if (check) {
      if (Status s = check_posts(g); !s.ok()) fail_locked(s.with_context(name_));
    }
    g.count = 0;
    ++g.generation;
    cv_.notify_all();
    return failure_;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (g.generation == gen && failure_.ok()) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && g.generation == gen && failure_.ok()) {
      std::vector<int> missing;
      for (size_t m = 0; m < g.members.size(); ++m) {
        if (g.arrived[m] != gen + 1) missing.push_back(g.members[m]);
      }
      fail_locked(unavailable("{}: rank{} {} did not reach {} (group [{}]) within {} ms", name_,
                              missing.size() > 1 ? "s" : "", fmt::join(missing, ", "), post.op,
                              fmt::join(g.members, ", "), timeout_.count()));
    }
  }
  return failure_;
}

Status ThreadRendezvous::check_posts(const Group& g) {
  const RendezvousPost& p0 = g.posts[0];
  for (size_t m = 1; m < g.posts.size(); ++m) {
    const RendezvousPost& p = g.posts[m];
    const bool same = std::strcmp(p.op, p0.op) == 0 && p.dtype == p0.dtype && p.root == p0.root &&
                      (p.sizes_may_differ || p.numel == p0.numel);
    if (!same) {
      return internal_error(
          "group [{}] out of step: rank {} called {} ({}, {} elements, root {}), rank {} called {} ({}, {} "
          "elements, root {})",
          fmt::join(g.members, ", "), g.members[0], p0.op, dtype_name(p0.dtype), p0.numel, p0.root,
          g.members[m], p.op, dtype_name(p.dtype), p.numel, p.root);
    }
  }
  return {};
}

Status ThreadRendezvous::put(Group& g, int src, int dst, int tag, std::vector<uint8_t> payload) {
  std::lock_guard lock(mu_);
  if (!failure_.ok()) return failure_;
  g.mailbox[{src, dst, tag}].push_back(std::move(payload));
  cv_.notify_all();
  return {};
}

Result<std::vector<uint8_t>> ThreadRendezvous::take(Group& g, int src, int dst, int tag) {
  std::unique_lock lock(mu_);
  auto& queue = g.mailbox[{src, dst, tag}];
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (queue.empty() && failure_.ok()) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && queue.empty() && failure_.ok()) {
      fail_locked(unavailable("{}: rank {} sent nothing to rank {} (group [{}]) within {} ms", name_,
                              g.members[src], g.members[dst], fmt::join(g.members, ", "), timeout_.count()));
    }
  }
  if (!failure_.ok()) return failure_;
  std::vector<uint8_t> payload = std::move(queue.front());
  queue.pop_front();
  return payload;
}

void ThreadRendezvous::fail(int world_rank, const std::string& reason) {
  std::lock_guard lock(mu_);
  fail_locked(internal_error("rank {} failed: {}", world_rank, reason));
}

Status ThreadRendezvous::status() const {
  std::lock_guard lock(mu_);
  return failure_;
}

}  // namespace rill::dist
