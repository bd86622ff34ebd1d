#include "backend/cpu/comm/thread_communicator.h"

#include <cstring>
#include <numeric>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace rill::backend {

namespace {

using dist::RendezvousPost;
using dist::ThreadRendezvous;

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

constexpr int kSendTag = 0;

class ThreadCommunicator final : public dist::Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadRendezvous> r, ThreadRendezvous::Group* group, int member)
      : Communicator(member, int(ThreadRendezvous::members(*group).size()), Device::Cpu),
        r_(std::move(r)),
        g_(*group) {}

  std::string describe() const override {
    return fmt::format("thread communicator, rank {} of group [{}]", rank(),
                       fmt::join(ThreadRendezvous::members(g_), ", "));
  }

 protected:
  Status all_reduce_sum_impl(const TensorView& in, const TensorView& out) override {
    // A temporary, since out may be in, which the others are reading.
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
      for (int r = 0; r < size(); ++r) std::memcpy(result.data() + r * n, post(r).in, n);
    }));
    std::memcpy(out.data, result.data(), result.size());
    return {};
  }

  Status all_to_all_v_impl(const TensorView& in, std::span<const int64_t> send_rows, const TensorView& out,
                           std::span<const int64_t> recv_rows) override {
    const size_t row = dist::row_bytes(in);
    Status mismatch;
    RendezvousPost p{"all_to_all_v", in.dtype, dist::row_elements(in), in.data, send_rows};
    p.sizes_may_differ = true;
    RILL_TRY(collective(p, [&] {
      auto* dst = static_cast<uint8_t*>(out.data);
      for (int j = 0; j < size(); ++j) {
        const RendezvousPost& pj = post(j);
        const int64_t rows = pj.send_rows[rank()];
        if (rows != recv_rows[j]) {
          mismatch = invalid_argument("all_to_all_v: rank {} sends {} rows to rank {}, which expects {}", j,
                                      rows, rank(), recv_rows[j]);
          return;
        }
        const int64_t offset =
            std::accumulate(pj.send_rows.begin(), pj.send_rows.begin() + rank(), int64_t(0));
        std::memcpy(dst, static_cast<const uint8_t*>(pj.in) + offset * row, rows * row);
        dst += rows * row;
      }
    }));
    return mismatch;
  }

  Status broadcast_impl(const TensorView& data, int root) override {
    RendezvousPost p{"broadcast", data.dtype, data.numel(), data.data};
    p.root = root;
    // Only root's buffer is read and only the others' written, so no temporary is needed.
    return collective(p, [&] {
      if (rank() != root) std::memcpy(data.data, post(root).in, data.nbytes());
    });
  }

  Status broadcast_bytes_impl(std::vector<uint8_t>& bytes, int root) override {
    RendezvousPost p{"broadcast_bytes"};
    p.root = root;
    p.extra = &bytes;
    p.sizes_may_differ = true;
    return collective(p, [&] {
      if (rank() != root) bytes = *static_cast<const std::vector<uint8_t>*>(post(root).extra);
    });
  }

  Status barrier_impl() override { return r_->arrive(g_, rank(), {"barrier"}, true); }

  // Buffered: a send never waits for its recv (NCCL's does; callers must not rely on either).
  Status send_impl(const TensorView& in, int peer) override {
    const auto* p = static_cast<const uint8_t*>(in.data);
    return r_->put(g_, rank(), peer, kSendTag, std::vector<uint8_t>(p, p + in.nbytes()));
  }

  Status recv_impl(const TensorView& out, int peer) override {
    RILL_ASSIGN_OR_RETURN(std::vector<uint8_t> payload, r_->take(g_, peer, rank(), kSendTag));
    if (payload.size() != out.nbytes()) {
      return invalid_argument("recv: rank {} sent {} bytes, out {} holds {}",
                              ThreadRendezvous::members(g_)[peer], payload.size(), out.describe(),
                              out.nbytes());
    }
    std::memcpy(out.data, payload.data(), payload.size());
    return {};
  }

 private:
  const RendezvousPost& post(int member) const { return ThreadRendezvous::post(g_, member); }

  // Post, wait for every member, run `body` (which reads the members' posts), wait until all have read.
  template <typename Body>
  Status collective(const RendezvousPost& p, Body&& body) {
    RILL_TRY(r_->arrive(g_, rank(), p, true));
    body();
    return r_->arrive(g_, rank(), p, false);
  }

  // Elements [begin, begin + n) of the members' inputs summed in rank order in fp32, rounded once, into dst.
  void sum_rows(DType t, int64_t begin, int64_t n, void* dst) const {
    for (int64_t i = 0; i < n; ++i) {
      float acc = load(post(0).in, t, begin + i);  // not 0 + x: that would turn -0 into +0
      for (int r = 1; r < size(); ++r) acc += load(post(r).in, t, begin + i);
      store(dst, t, i, acc);
    }
  }

  std::shared_ptr<ThreadRendezvous> r_;
  ThreadRendezvous::Group& g_;
};

}  // namespace

std::shared_ptr<ThreadCommHub> ThreadCommHub::make(int world_size, ThreadCommOptions options) {
  return std::shared_ptr<ThreadCommHub>(new ThreadCommHub(
      std::make_shared<ThreadRendezvous>(world_size, options.timeout, "thread communicator")));
}

Result<std::unique_ptr<dist::Communicator>> ThreadCommHub::communicator(int world_rank,
                                                                        const std::vector<int>& group) {
  int member = 0;
  RILL_ASSIGN_OR_RETURN(ThreadRendezvous::Group * g, rendezvous_->group(world_rank, group, &member));
  return std::unique_ptr<dist::Communicator>(new ThreadCommunicator(rendezvous_, g, member));
}

}  // namespace rill::backend
