// The MPI bootstrap and the MPI communicator, in every process of an mpirun (ctest runs the program alone, a
// world of one, and under `mpirun --oversubscribe -np 2`), against closed forms: integer sums, the bf16
// round-once rule, uneven all_to_all_v splits, and the bootstrap's broadcast of an NCCL-id-sized blob.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

#include "backend/cpu/comm/mpi_communicator.h"
#include "dist/mapping.h"
#include "dist/mpi_bootstrap.h"
#include "test_seed.h"

namespace rill::backend {
namespace {

using dist::Communicator;

class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    auto w = dist::mpi_init();
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    world = *w;
    // One seed for all processes: each draws its own under RILL_TEST_SEED=random, and processes that disagree
    // on sizes would wait on each other forever (MPI has no timeouts). Rank 0's is the one printed for
    // replay.
    std::vector<uint8_t> bytes(sizeof(uint32_t));
    const uint32_t mine = testing::test_seed();
    std::memcpy(bytes.data(), &mine, sizeof mine);
    ASSERT_TRUE(dist::mpi_broadcast_bytes(bytes, 0).ok());
    std::memcpy(&seed, bytes.data(), sizeof seed);
    if (seed != mine) std::printf("[ seed     ] %u (rank 0's, used by every process)\n", seed);
  }
  void TearDown() override { dist::mpi_finalize(); }
  static inline dist::MpiWorld world;
  static inline uint32_t seed = 0;
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

int value_at(uint32_t seed, int r, int64_t i) {
  return int((seed * 2654435761u + r * 7919u + i * 104729u) % 65) - 32;
}

float at(const HostTensor& t, int64_t i) {
  return load_as_f32(t.view.data, t.view.dtype, size_t(i));
}

HostTensor filled(DType t, Shape shape, const std::function<float(int64_t)>& v) {
  HostTensor h = HostTensor::zeros(t, shape);
  for (int64_t i = 0; i < shape.numel(); ++i) {
    if (t == DType::F32) {
      h.view.ptr<float>()[i] = v(i);
    } else {
      h.view.ptr<uint16_t>()[i] = f32_to_bf16(v(i));
    }
  }
  return h;
}

std::unique_ptr<Communicator> world_comm() {
  auto c = make_mpi_communicator(0, MpiEnvironment::world.rank);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(*c) : nullptr;
}

TEST(MpiComm, WorldMatchesTheEnvironment) {
  ASSERT_TRUE(dist::mpi_built());
  auto c = world_comm();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->rank(), MpiEnvironment::world.rank);
  EXPECT_EQ(c->size(), MpiEnvironment::world.size);
  EXPECT_GE(MpiEnvironment::world.local_rank, 0);
}

TEST(MpiComm, SumsGatherScatterAreTheClosedForms) {
  const uint32_t seed = MpiEnvironment::seed;
  auto c = world_comm();
  ASSERT_NE(c, nullptr);
  const int n = c->size(), r = c->rank();
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    HostTensor x = filled(t, {3, 11}, [&](int64_t i) { return float(value_at(seed, r, i)); });
    HostTensor out = HostTensor::zeros(t, {3, 11});
    ASSERT_TRUE(c->all_reduce_sum(x.view, out.view).ok());
    ASSERT_TRUE(c->all_reduce_sum(x.view, x.view).ok());
    for (int64_t i = 0; i < 33; ++i) {
      int sum = 0;
      for (int q = 0; q < n; ++q) sum += value_at(seed, q, i);
      ASSERT_EQ(at(out, i), float(sum)) << "element " << i;
      ASSERT_EQ(at(x, i), float(sum)) << "in place, element " << i;
    }
    HostTensor g_in = filled(t, {2, 3}, [&](int64_t i) { return float(value_at(seed, r, i)); });
    HostTensor g = HostTensor::zeros(t, {2 * n, 3});
    ASSERT_TRUE(c->all_gather(g_in.view, g.view).ok());
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < 6; ++i) ASSERT_EQ(at(g, q * 6 + i), float(value_at(seed, q, i)));
    HostTensor big = filled(t, {2 * n, 3}, [&](int64_t i) { return float(value_at(seed, r, i)); });
    HostTensor part = HostTensor::zeros(t, {2, 3});
    ASSERT_TRUE(c->reduce_scatter(big.view, part.view).ok());
    for (int64_t i = 0; i < 6; ++i) {
      int sum = 0;
      for (int q = 0; q < n; ++q) sum += value_at(seed, q, r * 6 + i);
      ASSERT_EQ(at(part, i), float(sum));
    }
  }
}

// As in the thread communicator's test: 1 on rank 0 and 2^-8 elsewhere sums to 1 + (n-1) 2^-8, rounded once.
TEST(MpiComm, Bf16SumRoundsOnce) {
  auto c = world_comm();
  ASSERT_NE(c, nullptr);
  const int n = c->size();
  HostTensor x = HostTensor::zeros(DType::BF16, {1});
  x.view.ptr<uint16_t>()[0] = f32_to_bf16(c->rank() == 0 ? 1.0f : std::ldexp(1.0f, -8));
  ASSERT_TRUE(c->all_reduce_sum(x.view, x.view).ok());
  const double ulps = (n - 1) / 2.0;  // in units of 2^-7
  const double fl = std::floor(ulps);
  const double rounded = fl + ((ulps - fl > 0.5 || (ulps - fl == 0.5 && int(fl) % 2 == 1)) ? 1 : 0);
  EXPECT_EQ(at(x, 0), float(1.0 + rounded * std::ldexp(1.0, -7)));
}

TEST(MpiComm, AllToAllVBroadcastSendRecv) {
  const uint32_t seed = MpiEnvironment::seed;
  auto c = world_comm();
  ASSERT_NE(c, nullptr);
  const int n = c->size(), r = c->rank();
  auto rows = [&](int src, int dst) { return int64_t((seed + src * 31 + dst * 17) % 4); };
  auto value = [&](int src, int dst, int64_t k, int64_t col) {
    return float(src * 1000 + dst * 100 + k * 10 + col);
  };
  std::vector<int64_t> send(n), recv(n);
  std::vector<float> in_values;
  int64_t tr = 0;
  for (int j = 0; j < n; ++j) {
    send[j] = rows(r, j);
    recv[j] = rows(j, r);
    tr += recv[j];
    for (int64_t k = 0; k < send[j]; ++k)
      for (int64_t col = 0; col < 2; ++col) in_values.push_back(value(r, j, k, col));
  }
  HostTensor in = filled(DType::F32, {std::max<int64_t>(int64_t(in_values.size()) / 2, 1), 2},
                         [&](int64_t i) { return i < int64_t(in_values.size()) ? in_values[i] : 0.0f; });
  HostTensor out = HostTensor::zeros(DType::F32, {std::max<int64_t>(tr, 1), 2});
  ASSERT_TRUE(c->all_to_all_v(in.view, send, out.view, recv).ok());
  int64_t i = 0;
  for (int j = 0; j < n; ++j)
    for (int64_t k = 0; k < recv[j]; ++k)
      for (int64_t col = 0; col < 2; ++col, ++i)
        ASSERT_EQ(at(out, i), value(j, r, k, col)) << "from rank " << j;

  HostTensor b = filled(DType::BF16, {4}, [&](int64_t i) { return float(value_at(seed, r, i)); });
  ASSERT_TRUE(c->broadcast(b.view, n - 1).ok());
  for (int64_t i = 0; i < 4; ++i) ASSERT_EQ(at(b, i), float(value_at(seed, n - 1, i)));

  std::vector<uint8_t> bytes;
  if (r == 0) bytes.assign(41, uint8_t(seed));
  ASSERT_TRUE(c->broadcast_bytes(bytes, 0).ok());
  EXPECT_EQ(bytes, std::vector<uint8_t>(41, uint8_t(seed)));

  if (n > 1) {  // a ring, ordered by parity so no blocking send waits on a send
    HostTensor mine = filled(DType::F32, {3}, [&](int64_t i) { return float(r * 10 + i); });
    HostTensor got = HostTensor::zeros(DType::F32, {3});
    if (r % 2 == 0) {
      ASSERT_TRUE(c->send(mine.view, (r + 1) % n).ok());
      ASSERT_TRUE(c->recv(got.view, (r + n - 1) % n).ok());
    } else {
      ASSERT_TRUE(c->recv(got.view, (r + n - 1) % n).ok());
      ASSERT_TRUE(c->send(mine.view, (r + 1) % n).ok());
    }
    for (int64_t i = 0; i < 3; ++i) ASSERT_EQ(at(got, i), float(((r + n - 1) % n) * 10 + i));
  }
  EXPECT_TRUE(c->barrier().ok());
}

// The bootstrap carries rank 0's NCCL unique id (128 bytes) to every process; sub-groups come from a Mapping.
TEST(MpiComm, BootstrapBroadcastAndMappingGroups) {
  const uint32_t seed = MpiEnvironment::seed;
  const int n = MpiEnvironment::world.size, r = MpiEnvironment::world.rank;
  std::vector<uint8_t> id;
  if (r == 0) {
    for (int k = 0; k < 128; ++k) id.push_back(uint8_t(seed + k * 7));
  }
  ASSERT_TRUE(dist::mpi_broadcast_bytes(id, 0).ok());
  ASSERT_EQ(id.size(), 128u);
  for (int k = 0; k < 128; ++k) ASSERT_EQ(id[k], uint8_t(seed + k * 7));

  // PP over all processes, TP 1: every TP group is one process.
  auto m = dist::Mapping::make({n, 1, 1, n, 1}, r);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto tp = make_mpi_communicator(m->group_index(dist::GroupKind::Tp), m->rank_in(dist::GroupKind::Tp));
  ASSERT_TRUE(tp.ok()) << tp.status().to_string();
  EXPECT_EQ((*tp)->size(), 1);
  HostTensor x = filled(DType::F32, {2}, [&](int64_t i) { return float(r + i); });
  ASSERT_TRUE((*tp)->all_reduce_sum(x.view, x.view).ok());
  EXPECT_EQ(at(x, 1), float(r + 1));  // a group of one sums to itself
  auto pp = make_mpi_communicator(m->group_index(dist::GroupKind::Pp), m->rank_in(dist::GroupKind::Pp));
  ASSERT_TRUE(pp.ok());
  EXPECT_EQ((*pp)->size(), n);
  EXPECT_EQ((*pp)->rank(), m->pp_rank());
}

}  // namespace
}  // namespace rill::backend
