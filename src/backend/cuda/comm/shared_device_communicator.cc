#include "backend/cuda/comm/shared_device_communicator.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/cuda/comm/rank_sum.h"
#include "backend/cuda/common/check.h"

namespace rill::cuda {

struct SharedDeviceCommHub::Slot {
  cudaEvent_t ready = nullptr;  // this member's inputs are ready (recorded before the first meeting)
  cudaEvent_t done = nullptr;   // this member has read the others' inputs (before the second)
};

namespace {

using dist::RendezvousPost;
using dist::ThreadRendezvous;

constexpr int kSendTag = 0, kAckTag = 1;

// A send's message to its recv and the recv's answer (raw bytes through the rendezvous mailbox).
struct SendMessage {
  const void* data;
  size_t nbytes;
  cudaEvent_t ready;  // destroyed by the receiver once its stream waits on it
};
struct AckMessage {
  cudaEvent_t copied;  // destroyed by the sender once its stream waits on it
};

template <typename T>
std::vector<uint8_t> to_bytes(const T& v) {
  std::vector<uint8_t> b(sizeof(T));
  std::memcpy(b.data(), &v, sizeof(T));
  return b;
}
template <typename T>
T from_bytes(const std::vector<uint8_t>& b) {
  T v;
  std::memcpy(&v, b.data(), sizeof(T));
  return v;
}

class SharedDeviceCommunicator final : public dist::Communicator {
 public:
  SharedDeviceCommunicator(std::shared_ptr<SharedDeviceCommHub> hub, std::shared_ptr<ThreadRendezvous> r,
                           ThreadRendezvous::Group* group, int member, SharedDeviceCommHub::Slot* slot,
                           int device, cudaStream_t stream)
      : Communicator(member, int(ThreadRendezvous::members(*group).size()), Device::Cuda),
        hub_(std::move(hub)),
        r_(std::move(r)),
        g_(*group),
        slot_(slot),
        device_(device),
        stream_(stream) {}

  ~SharedDeviceCommunicator() override {
    if (scratch_ != nullptr) {
      cudaStreamSynchronize(stream_);
      cudaFree(scratch_);
    }
  }

  std::string describe() const override {
    return fmt::format("shared-device communicator (GPU {}), rank {} of group [{}]", device_, rank(),
                       fmt::join(ThreadRendezvous::members(g_), ", "));
  }

 protected:
  Status all_reduce_sum_impl(const TensorView& in, const TensorView& out) override {
    RILL_TRY(reserve(out.nbytes()));
    return collective(
        {"all_reduce_sum", in.dtype, in.numel(), in.data}, [&] { return sum(in.dtype, 0, in.numel()); },
        [&] { return copy_scratch(out); });
  }

  Status reduce_scatter_impl(const TensorView& in, const TensorView& out) override {
    RILL_TRY(reserve(out.nbytes()));
    return collective(
        {"reduce_scatter", in.dtype, in.numel(), in.data},
        [&] { return sum(in.dtype, int64_t(rank()) * out.numel(), out.numel()); },
        [&] { return copy_scratch(out); });
  }

  Status all_gather_impl(const TensorView& in, const TensorView& out) override {
    RILL_TRY(reserve(out.nbytes()));
    const size_t n = in.nbytes();
    return collective(
        {"all_gather", in.dtype, in.numel(), in.data},
        [&]() -> Status {
          for (int r = 0; r < size(); ++r) {
            RILL_CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(scratch_) + r * n, posts_[r].in, n,
                                            cudaMemcpyDeviceToDevice, stream_));
          }
          return {};
        },
        [&] { return copy_scratch(out); });
  }

  Status all_to_all_v_impl(const TensorView& in, std::span<const int64_t> send_rows, const TensorView& out,
                           std::span<const int64_t> recv_rows) override {
    const size_t row = dist::row_bytes(in);
    Status mismatch;
    RendezvousPost p{"all_to_all_v", in.dtype, dist::row_elements(in), in.data, send_rows};
    p.sizes_may_differ = true;
    RILL_TRY(collective(
        p,
        [&]() -> Status {
          auto* dst = static_cast<uint8_t*>(out.data);
          for (int j = 0; j < size(); ++j) {
            const int64_t rows = posts_[j].send_rows[rank()];
            if (rows != recv_rows[j]) {
              mismatch = invalid_argument("all_to_all_v: rank {} sends {} rows to rank {}, which expects {}",
                                          j, rows, rank(), recv_rows[j]);
              return {};
            }
            const int64_t offset = std::accumulate(posts_[j].send_rows.begin(),
                                                   posts_[j].send_rows.begin() + rank(), int64_t(0));
            if (rows > 0) {
              RILL_CUDA_CHECK(cudaMemcpyAsync(dst, static_cast<const uint8_t*>(posts_[j].in) + offset * row,
                                              rows * row, cudaMemcpyDeviceToDevice, stream_));
            }
            dst += rows * row;
          }
          return {};
        },
        [] { return Status{}; }));
    return mismatch;
  }

  Status broadcast_impl(const TensorView& data, int root) override {
    RendezvousPost p{"broadcast", data.dtype, data.numel(), data.data};
    p.root = root;
    return collective(
        p,
        [&]() -> Status {
          if (rank() != root) {
            RILL_CUDA_CHECK(cudaMemcpyAsync(data.data, posts_[root].in, data.nbytes(),
                                            cudaMemcpyDeviceToDevice, stream_));
          }
          return {};
        },
        [] { return Status{}; });
  }

  // Host bytes: a host meeting only.
  Status broadcast_bytes_impl(std::vector<uint8_t>& bytes, int root) override {
    RendezvousPost p{"broadcast_bytes"};
    p.root = root;
    p.extra = &bytes;
    p.sizes_may_differ = true;
    RILL_TRY(r_->arrive(g_, rank(), p, true));
    if (rank() != root)
      bytes = *static_cast<const std::vector<uint8_t>*>(ThreadRendezvous::post(g_, root).extra);
    return r_->arrive(g_, rank(), p, false);
  }

  // Every rank's queued work is finished when barrier returns.
  Status barrier_impl() override {
    RILL_CUDA_CHECK(cudaSetDevice(device_));
    RILL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return r_->arrive(g_, rank(), {"barrier"}, true);
  }

  Status send_impl(const TensorView& in, int peer) override {
    RILL_CUDA_CHECK(cudaSetDevice(device_));
    SendMessage m{in.data, in.nbytes(), nullptr};
    RILL_CUDA_CHECK(cudaEventCreateWithFlags(&m.ready, cudaEventDisableTiming));
    RILL_CUDA_CHECK(cudaEventRecord(m.ready, stream_));
    RILL_TRY(r_->put(g_, rank(), peer, kSendTag, to_bytes(m)));
    // The buffer may be reused once the receiver's copy is done: wait for its answer, like NCCL's send.
    RILL_ASSIGN_OR_RETURN(std::vector<uint8_t> ack, r_->take(g_, peer, rank(), kAckTag));
    const auto a = from_bytes<AckMessage>(ack);
    RILL_CUDA_CHECK(cudaStreamWaitEvent(stream_, a.copied, 0));
    RILL_CUDA_CHECK(cudaEventDestroy(a.copied));
    return {};
  }

  Status recv_impl(const TensorView& out, int peer) override {
    RILL_CUDA_CHECK(cudaSetDevice(device_));
    RILL_ASSIGN_OR_RETURN(std::vector<uint8_t> msg, r_->take(g_, peer, rank(), kSendTag));
    const auto m = from_bytes<SendMessage>(msg);
    AckMessage a{nullptr};
    RILL_CUDA_CHECK(cudaEventCreateWithFlags(&a.copied, cudaEventDisableTiming));
    const bool fits = m.nbytes == out.nbytes();
    RILL_CUDA_CHECK(cudaStreamWaitEvent(stream_, m.ready, 0));
    RILL_CUDA_CHECK(cudaEventDestroy(m.ready));
    if (fits) RILL_CUDA_CHECK(cudaMemcpyAsync(out.data, m.data, m.nbytes, cudaMemcpyDeviceToDevice, stream_));
    RILL_CUDA_CHECK(cudaEventRecord(a.copied, stream_));
    RILL_TRY(r_->put(g_, rank(), peer, kAckTag, to_bytes(a)));  // answered even on a mismatch: no hang
    if (!fits) {
      return invalid_argument("recv: rank {} sent {} bytes, out {} holds {}",
                              ThreadRendezvous::members(g_)[peer], m.nbytes, out.describe(), out.nbytes());
    }
    return {};
  }

 private:
  // Record ready, meet, wait for the others' inputs, `work` on the stream, record done, meet, wait for
  // everyone's reads, `finish` (write outputs).
  template <typename Work, typename Finish>
  Status collective(RendezvousPost p, Work&& work, Finish&& finish) {
    RILL_CUDA_CHECK(cudaSetDevice(device_));
    RILL_CUDA_CHECK(cudaEventRecord(slot_->ready, stream_));
    p.extra = slot_;
    RILL_TRY(r_->arrive(g_, rank(), p, true));
    // Copied now: a post may be replaced as soon as the second meeting is over; slots live as long as the
    // hub.
    posts_.resize(size());
    slots_.resize(size());
    for (int r = 0; r < size(); ++r) {
      posts_[r] = ThreadRendezvous::post(g_, r);
      slots_[r] = static_cast<const SharedDeviceCommHub::Slot*>(posts_[r].extra);
      if (r != rank()) RILL_CUDA_CHECK(cudaStreamWaitEvent(stream_, slots_[r]->ready, 0));
    }
    Status worked = work();
    RILL_CUDA_CHECK(cudaEventRecord(slot_->done, stream_));
    // Meet even when the work failed, so the others are not left waiting until the timeout.
    RILL_TRY(r_->arrive(g_, rank(), p, false));
    RILL_TRY(worked);
    for (int r = 0; r < size(); ++r) {
      if (r != rank()) RILL_CUDA_CHECK(cudaStreamWaitEvent(stream_, slots_[r]->done, 0));
    }
    return finish();
  }

  Status sum(DType t, int64_t offset, int64_t n) {
    RankSumParams p{};
    for (int r = 0; r < size(); ++r) p.in[r] = posts_[r].in;
    p.out = scratch_;
    p.ranks = size();
    p.offset = offset;
    p.n = n;
    p.bf16 = t == DType::BF16;
    return launch_rank_sum(p, stream_);
  }

  Status copy_scratch(const TensorView& out) {
    RILL_CUDA_CHECK(cudaMemcpyAsync(out.data, scratch_, out.nbytes(), cudaMemcpyDeviceToDevice, stream_));
    return {};
  }

  // Grows the scratch between collectives (the old one may still be read by this stream's queued work).
  Status reserve(size_t nbytes) {
    if (nbytes <= scratch_bytes_) return {};
    RILL_CUDA_CHECK(cudaSetDevice(device_));
    if (scratch_ != nullptr) {
      RILL_CUDA_CHECK(cudaStreamSynchronize(stream_));
      RILL_CUDA_CHECK(cudaFree(scratch_));
      scratch_ = nullptr;
    }
    RILL_CUDA_CHECK(cudaMalloc(&scratch_, nbytes));
    scratch_bytes_ = nbytes;
    return {};
  }

  std::shared_ptr<SharedDeviceCommHub> hub_;  // keeps the slots alive
  std::shared_ptr<ThreadRendezvous> r_;
  ThreadRendezvous::Group& g_;
  SharedDeviceCommHub::Slot* slot_;
  int device_;
  cudaStream_t stream_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  std::vector<RendezvousPost> posts_;
  std::vector<const SharedDeviceCommHub::Slot*> slots_;
};

}  // namespace

Result<std::shared_ptr<SharedDeviceCommHub>> SharedDeviceCommHub::make(int world_size, int device,
                                                                       SharedDeviceCommOptions options) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
    return unavailable("shared-device communicator: no GPU {} ({} present)", device, count);
  }
  return std::shared_ptr<SharedDeviceCommHub>(new SharedDeviceCommHub(
      std::make_shared<dist::ThreadRendezvous>(world_size, options.timeout, "shared-device communicator"),
      device));
}

SharedDeviceCommHub::SharedDeviceCommHub(std::shared_ptr<dist::ThreadRendezvous> r, int device)
    : rendezvous_(std::move(r)), device_(device) {}

SharedDeviceCommHub::~SharedDeviceCommHub() {
  cudaSetDevice(device_);
  for (auto& s : slots_) {
    cudaEventDestroy(s->ready);
    cudaEventDestroy(s->done);
  }
}

Result<std::unique_ptr<dist::Communicator>> SharedDeviceCommHub::communicator(int world_rank,
                                                                              const std::vector<int>& group,
                                                                              void* stream) {
  if (group.size() > size_t(kMaxSharedRanks)) {
    return invalid_argument("shared-device communicator: a group of {} ranks, at most {} share a GPU",
                            group.size(), kMaxSharedRanks);
  }
  int member = 0;
  RILL_ASSIGN_OR_RETURN(dist::ThreadRendezvous::Group * g, rendezvous_->group(world_rank, group, &member));
  RILL_CUDA_CHECK(cudaSetDevice(device_));
  auto slot = std::make_unique<Slot>();
  RILL_CUDA_CHECK(cudaEventCreateWithFlags(&slot->ready, cudaEventDisableTiming));
  RILL_CUDA_CHECK(cudaEventCreateWithFlags(&slot->done, cudaEventDisableTiming));
  Slot* raw = slot.get();
  {
    std::lock_guard lock(mu_);
    slots_.push_back(std::move(slot));
  }
  return std::unique_ptr<dist::Communicator>(new SharedDeviceCommunicator(
      shared_from_this(), rendezvous_, g, member, raw, device_, static_cast<cudaStream_t>(stream)));
}

}  // namespace rill::cuda
