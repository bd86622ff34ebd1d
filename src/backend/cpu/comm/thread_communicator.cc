#include "backend/cpu/comm/thread_communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace rill::backend::cpu {

namespace {

// What a member brings to a collective; the others read it between the two rendezvous of the call.
struct Post {
  const char* op = nullptr;
  DType dtype = DType::F32;
  int64_t numel = 0;
  const void* in = nullptr;
  std::span<const int64_t> send_rows;
  int root = -1;
  const std::vector<uint8_t>* bytes = nullptr;
};

struct Group {
  std::vector<int> members;  // world ranks
  std::vector<Post> posts;
  std::vector<uint64_t> arrived;  // the generation each member last arrived for
  uint64_t generation = 0;
  int count = 0;
  // send/recv messages, buffered: (src member, dst member) -> queue of payloads.
  std::map<std::pair<int, int>, std::deque<std::vector<uint8_t>>> mailbox;
};

}  // namespace

struct ThreadCommHub::State {
  int world = 0;
  ThreadCommOptions options;
  std::mutex mu;
  std::condition_variable cv;
  Status failure;  // the first failure; every later call returns it
  std::map<std::vector<int>, std::unique_ptr<Group>> groups;
  int communicators = 0;

  void fail_locked(Status s) {
    if (failure.ok()) failure = std::move(s);
    cv.notify_all();
  }

  // Waits until every member of g has arrived at this generation (or the hub failed / the deadline passed).
  // With `check`, the last to arrive checks that all members called the same collective on the same sizes.
  Status rendezvous(std::unique_lock<std::mutex>& lock, Group& g, int member, const char* op, bool check) {
    if (!failure.ok()) return failure;
    const uint64_t gen = g.generation;
    g.arrived[member] = gen + 1;
    if (++g.count == int(g.members.size())) {
      if (check) {
        if (Status s = check_posts(g); !s.ok()) fail_locked(std::move(s));
      }
      g.count = 0;
      ++g.generation;
      cv.notify_all();
      return failure;
    }
    const auto deadline = std::chrono::steady_clock::now() + options.timeout;
    while (g.generation == gen && failure.ok()) {
      if (cv.wait_until(lock, deadline) == std::cv_status::timeout && g.generation == gen && failure.ok()) {
        std::vector<int> missing;
        for (size_t m = 0; m < g.members.size(); ++m) {
          if (g.arrived[m] != gen + 1) missing.push_back(g.members[m]);
        }
        fail_locked(unavailable("thread communicator: rank{} {} did not reach {} (group [{}]) within {} ms",
                                missing.size() > 1 ? "s" : "", fmt::join(missing, ", "), op,
                                fmt::join(g.members, ", "), options.timeout.count()));
      }
    }
    return failure;
  }

  static Status check_posts(const Group& g) {
    const Post& p0 = g.posts[0];
    for (size_t m = 1; m < g.posts.size(); ++m) {
      const Post& p = g.posts[m];
      const bool same = std::strcmp(p.op, p0.op) == 0 && p.dtype == p0.dtype && p.root == p0.root &&
                        (std::strcmp(p.op, "all_to_all_v") == 0 || p.numel == p0.numel);
      if (!same) {
        return internal_error(
            "thread communicator: group [{}] out of step: rank {} called {} ({}, {} elements, root {}), rank "
            "{} "
            "called {} ({}, {} elements, root {})",
            fmt::join(g.members, ", "), g.members[0], p0.op, dtype_name(p0.dtype), p0.numel, p0.root,
            g.members[m], p.op, dtype_name(p.dtype), p.numel, p.root);
      }
    }
    return {};
  }
};

namespace {

float load(const void* p, DType t, int64_t i) {
  return t == DType::F32 ? static_cast<const float*>(p)[i] : bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
}

void store(void* p, DType t, int64_t i, float v) {
  if (t == DType::F32) {
    static_cast<float*>(p)[i] = v;
  } else {
    static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
  }
}

class ThreadCommunicator final : public dist::Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadCommHub> hub, ThreadCommHub::State* state, Group* group,
                     int member)
      : Communicator(member, int(group->members.size()), Device::Cpu),
        hub_(std::move(hub)),
        s_(*state),
        g_(*group) {}

  std::string describe() const override {
    return fmt::format("thread communicator, rank {} of group [{}]", rank(), fmt::join(g_.members, ", "));
  }

 protected:
  Status all_reduce_sum_impl(const TensorView& in, const TensorView& out) override {
    std::vector<uint8_t> result(out.nbytes());
    RILL_TRY(collective({"all_reduce_sum", in.dtype, in.numel(), in.data},
                        [&] { sum_rows(in.dtype, 0, in.numel(), result.data()); }));
    std::memcpy(out.data, result.data(), result.size());
    return {};
  }

  Status reduce_scatter_impl(const TensorView& in, const TensorView& out) override {
    std::vector<uint8_t> result(out.nbytes());
    RILL_TRY(collective({"reduce_scatter", in.dtype, in.numel(), in.data}, [&] {
      sum_rows(in.dtype, int64_t(rank()) * out.numel(), out.numel(), result.data());
    }));
    std::memcpy(out.data, result.data(), result.size());
    return {};
  }

  Status all_gather_impl(const TensorView& in, const TensorView& out) override {
    // A temporary, since `in` may be this rank's slice of `out` that the others are reading.
    std::vector<uint8_t> result(out.nbytes());
    const size_t n = in.nbytes();
    RILL_TRY(collective({"all_gather", in.dtype, in.numel(), in.data}, [&] {
      for (int r = 0; r < size(); ++r) std::memcpy(result.data() + r * n, g_.posts[r].in, n);
    }));
    std::memcpy(out.data, result.data(), result.size());
    return {};
  }

  Status all_to_all_v_impl(const TensorView& in, std::span<const int64_t> send_rows, const TensorView& out,
                           std::span<const int64_t> recv_rows) override {
    const size_t row = dist::row_bytes(in);
    Status mismatch;
    RILL_TRY(collective({"all_to_all_v", in.dtype, dist::row_elements(in), in.data, send_rows}, [&] {
      auto* dst = static_cast<uint8_t*>(out.data);
      for (int j = 0; j < size(); ++j) {
        const Post& p = g_.posts[j];
        const int64_t rows = p.send_rows[rank()];
        if (rows != recv_rows[j]) {
          mismatch = invalid_argument("all_to_all_v: rank {} sends {} rows to rank {}, which expects {}", j,
                                      rows, rank(), recv_rows[j]);
          return;
        }
        const int64_t offset = std::accumulate(p.send_rows.begin(), p.send_rows.begin() + rank(), int64_t(0));
        std::memcpy(dst, static_cast<const uint8_t*>(p.in) + offset * row, rows * row);
        dst += rows * row;
      }
    }));
    return mismatch;
  }

  Status broadcast_impl(const TensorView& data, int root) override {
    Post post{"broadcast", data.dtype, data.numel(), data.data};
    post.root = root;
    // Only root's buffer is read and only the others' written, so no temporary is needed.
    return collective(post, [&] {
      if (rank() != root) std::memcpy(data.data, g_.posts[root].in, data.nbytes());
    });
  }

  Status broadcast_bytes_impl(std::vector<uint8_t>& bytes, int root) override {
    Post post{"broadcast_bytes", DType::U8, 0, nullptr};
    post.root = root;
    post.bytes = &bytes;
    return collective(post, [&] {
      if (rank() != root) bytes = *g_.posts[root].bytes;
    });
  }

  Status barrier_impl() override {
    std::unique_lock lock(s_.mu);
    g_.posts[rank()] = Post{"barrier", DType::U8, 0, nullptr};
    return s_.rendezvous(lock, g_, rank(), "barrier", true);
  }

  // Buffered: a send never waits for its recv (NCCL's does; callers must not rely on either).
  Status send_impl(const TensorView& in, int peer) override {
    const auto* p = static_cast<const uint8_t*>(in.data);
    std::vector<uint8_t> payload(p, p + in.nbytes());
    std::lock_guard lock(s_.mu);
    if (!s_.failure.ok()) return s_.failure;
    g_.mailbox[{rank(), peer}].push_back(std::move(payload));
    s_.cv.notify_all();
    return {};
  }

  Status recv_impl(const TensorView& out, int peer) override {
    std::unique_lock lock(s_.mu);
    auto& queue = g_.mailbox[{peer, rank()}];
    const auto deadline = std::chrono::steady_clock::now() + s_.options.timeout;
    while (queue.empty() && s_.failure.ok()) {
      if (s_.cv.wait_until(lock, deadline) == std::cv_status::timeout && queue.empty() && s_.failure.ok()) {
        s_.fail_locked(unavailable(
            "thread communicator: rank {} sent nothing to rank {} (group [{}]) within {} ms",
            g_.members[peer], g_.members[rank()], fmt::join(g_.members, ", "), s_.options.timeout.count()));
      }
    }
    if (!s_.failure.ok()) return s_.failure;
    std::vector<uint8_t> payload = std::move(queue.front());
    queue.pop_front();
    if (payload.size() != out.nbytes()) {
      return invalid_argument("recv: rank {} sent {} bytes, out {} holds {}", g_.members[peer],
                              payload.size(), out.describe(), out.nbytes());
    }
    std::memcpy(out.data, payload.data(), payload.size());
    return {};
  }

 private:
  // Post, wait for every member, run `body` (which reads the members' posts), wait until all have read.
  template <typename Body>
  Status collective(const Post& post, Body&& body) {
    {
      std::unique_lock lock(s_.mu);
      g_.posts[rank()] = post;
      RILL_TRY(s_.rendezvous(lock, g_, rank(), post.op, true));
    }
    body();
    std::unique_lock lock(s_.mu);
    return s_.rendezvous(lock, g_, rank(), post.op, false);
  }

  // Elements [begin, begin + n) of the members' inputs summed in rank order in fp32, rounded once, into dst.
  void sum_rows(DType t, int64_t begin, int64_t n, void* dst) const {
    for (int64_t i = 0; i < n; ++i) {
      float acc = load(g_.posts[0].in, t, begin + i);  // not 0 + x: that would turn -0 into +0
      for (int r = 1; r < size(); ++r) acc += load(g_.posts[r].in, t, begin + i);
      store(dst, t, i, acc);
    }
  }

  std::shared_ptr<ThreadCommHub> hub_;  // keeps the state alive
  ThreadCommHub::State& s_;
  Group& g_;
};

}  // namespace

ThreadCommHub::ThreadCommHub(std::unique_ptr<State> state) : state_(std::move(state)) {}
ThreadCommHub::~ThreadCommHub() = default;

std::shared_ptr<ThreadCommHub> ThreadCommHub::make(int world_size, ThreadCommOptions options) {
  auto state = std::make_unique<State>();
  state->world = world_size;
  state->options = options;
  return std::shared_ptr<ThreadCommHub>(new ThreadCommHub(std::move(state)));
}

Result<std::unique_ptr<dist::Communicator>> ThreadCommHub::communicator(int world_rank,
                                                                        const std::vector<int>& group) {
  if (group.empty()) return invalid_argument("thread communicator: empty group");
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i] < 0 || group[i] >= state_->world || (i > 0 && group[i] <= group[i - 1])) {
      return invalid_argument("thread communicator: group [{}] is not ascending world ranks of a world of {}",
                              fmt::join(group, ", "), state_->world);
    }
  }
  const auto it = std::find(group.begin(), group.end(), world_rank);
  if (it == group.end()) {
    return invalid_argument("thread communicator: rank {} is not in group [{}]", world_rank,
                            fmt::join(group, ", "));
  }
  std::lock_guard lock(state_->mu);
  auto& g = state_->groups[group];
  if (!g) {
    g = std::make_unique<Group>();
    g->members = group;
    g->posts.resize(group.size());
    g->arrived.resize(group.size());
  }
  return std::unique_ptr<dist::Communicator>(
      new ThreadCommunicator(shared_from_this(), state_.get(), g.get(), int(it - group.begin())));
}

void ThreadCommHub::fail(int world_rank, const std::string& reason) {
  std::lock_guard lock(state_->mu);
  state_->fail_locked(internal_error("rank {} failed: {}", world_rank, reason));
}

Status ThreadCommHub::status() const {
  std::lock_guard lock(state_->mu);
  return state_->failure;
}

int ThreadCommHub::world_size() const {
  return state_->world;
}

}  // namespace rill::backend::cpu
