// The CUDA communicators against the thread communicator (itself checked in closed form): the shared-device
// communicator (several ranks on one GPU) must give the same bytes for every collective, sums included (the
// same fp32 rank-order accumulation); NCCL (one rank per GPU, as many GPUs as there are, up to 4) the same
// bytes for data movement and sums within bf16 rounding of them, identical on every rank. Skips without a
// GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "backend/cpu/comm/thread_communicator.h"
#include "backend/cuda/comm/shared_device_communicator.h"
#include "test_seed.h"
#if RILL_HAVE_NCCL
#include "backend/cuda/comm/nccl_communicator.h"
#endif

namespace rill::backend {
namespace {

using dist::Communicator;
using Bytes = std::vector<uint8_t>;

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

#define SKIP_WITHOUT_GPU() \
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device"

// Tensors of one rank on the host (the reference) or on its GPU, uploaded and read back on its stream.
class RankMemory {
 public:
  RankMemory(Device device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~RankMemory() {
    for (void* p : device_allocs_) cudaFree(p);
  }
  TensorView make(DType t, Shape shape, const Bytes& init) {
    const size_t n = size_t(shape.numel()) * dtype_size(t);
    void* p = nullptr;
    if (device_ == Device::Cpu) {
      host_.emplace_back(std::max<size_t>(n, 1));
      p = host_.back().data();
      std::memcpy(p, init.data(), n);
    } else {
      EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1)), cudaSuccess);
      device_allocs_.push_back(p);
      EXPECT_EQ(cudaMemcpyAsync(p, init.data(), n, cudaMemcpyHostToDevice, stream_), cudaSuccess);
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    }
    return TensorView::make(p, t, shape, device_);
  }
  Bytes read(const TensorView& v) {
    Bytes out(v.nbytes());
    if (device_ == Device::Cpu) {
      std::memcpy(out.data(), v.data, out.size());
    } else {
      EXPECT_EQ(cudaMemcpyAsync(out.data(), v.data, out.size(), cudaMemcpyDeviceToHost, stream_),
                cudaSuccess);
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    }
    return out;
  }

 private:
  Device device_;
  cudaStream_t stream_;
  std::vector<HostBuffer> host_;
  std::vector<void*> device_allocs_;
};

// Random values of dtype t (bf16-representable, so the host and device inputs are the same numbers; U8:
// bytes).
Bytes random_values(DType t, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Bytes b(size_t(n) * dtype_size(t));
  for (int64_t i = 0; i < n; ++i) {
    const float v = u(rng);
    if (t ==
        DType::U8) {  // (a bf16 store here overran the buffer: "malloc(): corrupted top size" on the H200)
      b[size_t(i)] = uint8_t(rng());
    } else if (t == DType::F32) {
      std::memcpy(b.data() + i * 4, &v, 4);
    } else {
      const uint16_t h = f32_to_bf16(v);
      std::memcpy(b.data() + i * 2, &h, 2);
    }
  }
  return b;
}

struct Outputs {
  std::vector<Bytes> sums;   // all_reduce_sum (out of place, in place), reduce_scatter
  std::vector<Bytes> moves;  // all_gather, all_to_all_v, broadcast, recv, broadcast_bytes
};

// Every collective once on communicator c of rank r (world n), inputs from the seed; what it produced.
Status run_script(Communicator& c, RankMemory& mem, DType t, uint32_t seed, Outputs& o) {
  const int n = c.size(), r = c.rank();
  const uint32_t s = seed * 7919u + uint32_t(r) * 104729u;
  // all_reduce_sum, out of place and in place.
  TensorView a = mem.make(t, {3, 40}, random_values(t, 120, s + 1));
  TensorView a_out = mem.make(t, {3, 40}, Bytes(120 * dtype_size(t)));
  RILL_TRY(c.all_reduce_sum(a, a_out));
  o.sums.push_back(mem.read(a_out));
  RILL_TRY(c.all_reduce_sum(a, a));
  o.sums.push_back(mem.read(a));
  // reduce_scatter
  TensorView big = mem.make(t, {2 * n, 8}, random_values(t, 16 * n, s + 2));
  TensorView part = mem.make(t, {2, 8}, Bytes(16 * dtype_size(t)));
  RILL_TRY(c.reduce_scatter(big, part));
  o.sums.push_back(mem.read(part));
  // all_gather
  TensorView g_in = mem.make(t, {2, 8}, random_values(t, 16, s + 3));
  TensorView g_out = mem.make(t, {2 * n, 8}, Bytes(16 * n * dtype_size(t)));
  RILL_TRY(c.all_gather(g_in, g_out));
  o.moves.push_back(mem.read(g_out));
  // all_to_all_v with uneven splits (zeros included)
  auto rows = [&](int src, int dst) { return int64_t((seed + src * 31 + dst * 17) % 4); };
  std::vector<int64_t> send(n), recv(n);
  int64_t ts = 0, tr = 0;
  for (int j = 0; j < n; ++j) {
    send[j] = rows(r, j);
    recv[j] = rows(j, r);
    ts += send[j];
    tr += recv[j];
  }
  TensorView x_in =
      mem.make(t, {std::max<int64_t>(ts, 1), 3}, random_values(t, std::max<int64_t>(ts, 1) * 3, s + 4));
  TensorView x_out =
      mem.make(t, {std::max<int64_t>(tr, 1), 3}, Bytes(std::max<int64_t>(tr, 1) * 3 * dtype_size(t)));
  RILL_TRY(c.all_to_all_v(x_in, send, x_out, recv));
  Bytes received = mem.read(x_out);
  received.resize(size_t(tr) * 3 * dtype_size(t));
  o.moves.push_back(received);
  // broadcast
  TensorView b = mem.make(t, {5, 4}, random_values(t, 20, s + 5));
  RILL_TRY(c.broadcast(b, 1 % n));
  o.moves.push_back(mem.read(b));
  // send/recv around a ring, ordered by parity (sends wait for their recv on the CUDA communicators)
  if (n > 1) {
    TensorView mine = mem.make(t, {6}, random_values(t, 6, s + 6));
    TensorView got = mem.make(t, {6}, Bytes(6 * dtype_size(t)));
    if (r % 2 == 0) {
      RILL_TRY(c.send(mine, (r + 1) % n));
      RILL_TRY(c.recv(got, (r + n - 1) % n));
    } else {
      RILL_TRY(c.recv(got, (r + n - 1) % n));
      RILL_TRY(c.send(mine, (r + 1) % n));
    }
    o.moves.push_back(mem.read(got));
  }
  Bytes host;
  if (r == n - 1) host = random_values(DType::U8, 37, s + 7);
  RILL_TRY(c.broadcast_bytes(host, n - 1));
  o.moves.push_back(host);
  return c.barrier();
}

// Runs `make_comm(rank, stream)` + the script on n threads, each with its own stream on `gpu_of(rank)`.
std::vector<Outputs> run_ranks(
    int n, Device device, DType t, uint32_t seed,
    const std::function<Result<std::unique_ptr<Communicator>>(int, cudaStream_t)>& make,
    const std::function<int(int)>& gpu_of) {
  std::vector<Outputs> outs(n);
  std::vector<Status> statuses(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      cudaStream_t stream = nullptr;
      if (device == Device::Cuda) {
        cudaSetDevice(gpu_of(r));
        cudaStreamCreate(&stream);
      }
      statuses[r] = [&]() -> Status {
        RILL_ASSIGN_OR_RETURN(auto comm, make(r, stream));
        RankMemory mem(device, stream);
        return run_script(*comm, mem, t, seed, outs[r]);
      }();
      if (stream != nullptr) cudaStreamDestroy(stream);
    });
  }
  for (auto& th : threads) th.join();
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].to_string();
  return outs;
}

std::vector<Outputs> reference(int n, DType t, uint32_t seed) {
  auto hub = ThreadCommHub::make(n);
  std::vector<int> all(n);
  for (int r = 0; r < n; ++r) all[r] = r;
  return run_ranks(
      n, Device::Cpu, t, seed, [&](int r, cudaStream_t) { return hub->communicator(r, all); },
      [](int) { return 0; });
}

class SharedDeviceWorlds : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(SharedDeviceWorlds, MatchesTheThreadCommunicatorByteForByte) {
  SKIP_WITHOUT_GPU();
  const auto [n, t] = GetParam();
  const uint32_t seed = testing::test_seed();
  auto hub = cuda::SharedDeviceCommHub::make(n, 0);
  ASSERT_TRUE(hub.ok()) << hub.status().to_string();
  std::vector<int> all(n);
  for (int r = 0; r < n; ++r) all[r] = r;
  const auto got = run_ranks(
      n, Device::Cuda, t, seed, [&](int r, cudaStream_t s) { return (*hub)->communicator(r, all, s); },
      [](int) { return 0; });
  const auto want = reference(n, t, seed);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(got[r].sums.size(), want[r].sums.size());
    ASSERT_EQ(got[r].moves.size(), want[r].moves.size());
    for (size_t k = 0; k < want[r].sums.size(); ++k)
      EXPECT_EQ(got[r].sums[k], want[r].sums[k]) << "rank " << r << " sum " << k;
    for (size_t k = 0; k < want[r].moves.size(); ++k)
      EXPECT_EQ(got[r].moves[k], want[r].moves[k]) << "rank " << r << " move " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, SharedDeviceWorlds,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8),
                                            ::testing::Values(DType::F32, DType::BF16)),
                         [](const auto& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) == DType::F32 ? "_f32" : "_bf16");
                         });

TEST(SharedDeviceComm, AMissingRankIsNamed) {
  SKIP_WITHOUT_GPU();
  auto hub = cuda::SharedDeviceCommHub::make(2, 0, {std::chrono::milliseconds(200)});
  ASSERT_TRUE(hub.ok());
  cudaStream_t s = nullptr;
  cudaStreamCreate(&s);
  auto c = (*hub)->communicator(0, {0, 1}, s);
  ASSERT_TRUE(c.ok());
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  const Status st = (*c)->all_reduce_sum(TensorView::make(p, DType::F32, {16}, Device::Cuda),
                                         TensorView::make(p, DType::F32, {16}, Device::Cuda));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank 1 did not reach all_reduce_sum"), std::string::npos) << st.message();
  cudaStreamSynchronize(s);
  cudaFree(p);
  c = Status(StatusCode::Cancelled, "released");
  cudaStreamDestroy(s);
}

#if RILL_HAVE_NCCL
// bf16 sums: NCCL rounds partial sums, so |nccl - reference| stays within a few bf16 ulps of the magnitudes.
void expect_sums_close(const Bytes& got, const Bytes& want, DType t, int n, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const size_t count = got.size() / dtype_size(t);
  for (size_t i = 0; i < count; ++i) {
    const float g = load_as_f32(got.data(), t, i), w = load_as_f32(want.data(), t, i);
    const float tol = t == DType::F32
                          ? 1e-6f * n
                          : std::ldexp(1.0f, -6) * n;  // inputs in [-1, 1]: n roundings of partials below n
    EXPECT_NEAR(g, w, tol) << what << " element " << i;
  }
}

class NcclWorlds : public ::testing::TestWithParam<DType> {};

TEST_P(NcclWorlds, OneRankPerGpuMatchesTheThreadCommunicator) {
  SKIP_WITHOUT_GPU();
  const DType t = GetParam();
  const int n = std::min(device_count(), 4);
  const uint32_t seed = testing::test_seed();
  auto id = cuda::nccl_unique_id();
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  const auto got = run_ranks(
      n, Device::Cuda, t, seed,
      [&](int r, cudaStream_t s) -> Result<std::unique_ptr<Communicator>> {
        RILL_ASSIGN_OR_RETURN(auto c, cuda::NcclCommunicator::make(*id, n, r, r, s));
        return std::unique_ptr<Communicator>(std::move(c));
      },
      [](int r) { return r; });
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
  const auto want = reference(n, t, seed);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(got[r].sums.size(), want[r].sums.size());
    ASSERT_EQ(got[r].moves.size(), want[r].moves.size());
    for (size_t k = 0; k < want[r].sums.size(); ++k) {
      expect_sums_close(got[r].sums[k], want[r].sums[k], t, n,
                        "rank " + std::to_string(r) + " sum " + std::to_string(k));
    }
    EXPECT_EQ(got[r].sums[0], got[0].sums[0]) << "rank " << r << "'s all-reduce differs from rank 0's";
    for (size_t k = 0; k < want[r].moves.size(); ++k)
      EXPECT_EQ(got[r].moves[k], want[r].moves[k]) << "rank " << r << " move " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NcclWorlds, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return info.param == DType::F32 ? "f32" : "bf16"; });

TEST(NcclComm, SplitAndAbort) {
  SKIP_WITHOUT_GPU();
  auto id = cuda::nccl_unique_id();
  ASSERT_TRUE(id.ok());
  cudaSetDevice(0);
  cudaStream_t s = nullptr;
  cudaStreamCreate(&s);
  auto world = cuda::NcclCommunicator::make(*id, 1, 0, 0, s);
  ASSERT_TRUE(world.ok()) << world.status().to_string();
  auto sub = (*world)->split(0, 0, s);
  ASSERT_TRUE(sub.ok()) << sub.status().to_string();
  EXPECT_EQ((*sub)->size(), 1);
  float host[4] = {1, -2, 3.5f, -0.0f}, back[4] = {};
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, sizeof host), cudaSuccess);
  cudaMemcpy(p, host, sizeof host, cudaMemcpyHostToDevice);
  const TensorView v = TensorView::make(p, DType::F32, {4}, Device::Cuda);
  ASSERT_TRUE((*sub)->all_reduce_sum(v, v).ok());
  ASSERT_TRUE((*sub)->barrier().ok());
  cudaMemcpy(back, p, sizeof back, cudaMemcpyDeviceToHost);
  EXPECT_EQ(std::memcmp(host, back, sizeof host), 0);  // a sum over one rank is the identity
  EXPECT_TRUE((*world)->check_async().ok());
  sub = Status(StatusCode::Cancelled, "released");  // before the parent is aborted
  (*world)->abort("watchdog: rank 1 stopped");
  const Status st = (*world)->all_reduce_sum(v, v);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("watchdog: rank 1 stopped"), std::string::npos) << st.message();
  world = Status(StatusCode::Cancelled, "released");
  cudaFree(p);
  cudaStreamDestroy(s);
}
#endif

}  // namespace
}  // namespace rill::backend
