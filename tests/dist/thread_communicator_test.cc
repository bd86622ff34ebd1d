// The thread communicator against values the test computes in closed form: integer-valued inputs (exact in
// f32 and bf16 in any order, so the expected sum is the integer sum), the bf16 round-once rule on values
// where rounding each partial sum would give another answer, uneven all_to_all_v splits, sub-groups of a
// Mapping running at once, and failures that must end in an error naming the rank instead of a hang.
#include "backend/cpu/comm/thread_communicator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "dist/mapping.h"
#include "test_seed.h"

namespace rill::backend {
namespace {

using dist::Communicator;

// Runs fn(rank, communicator over the whole world) on `world` threads; returns each rank's Status.
std::vector<Status> run_world(int world, const std::function<Status(int, Communicator&)>& fn,
                              ThreadCommOptions options = {}) {
  auto hub = ThreadCommHub::make(world, options);
  std::vector<int> all(world);
  for (int r = 0; r < world; ++r) all[r] = r;
  std::vector<Status> statuses(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto comm = hub->communicator(r, all);
      statuses[r] = comm.ok() ? fn(r, **comm) : comm.status();
    });
  }
  for (auto& t : threads) t.join();
  return statuses;
}

void expect_all_ok(const std::vector<Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r)
    EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].to_string();
}

// The integer every test puts at element i of rank r's input: |v| <= 32, so sums over 8 ranks stay exact in
// bf16.
int value_at(uint32_t seed, int r, int64_t i) {
  return int((seed * 2654435761u + r * 7919u + i * 104729u) % 65) - 32;
}

HostTensor filled(DType t, int64_t rows, int64_t cols, const std::function<int(int64_t)>& v) {
  HostTensor h = HostTensor::zeros(t, {rows, cols});
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (t == DType::F32) {
      h.view.ptr<float>()[i] = float(v(i));
    } else {
      h.view.ptr<uint16_t>()[i] = f32_to_bf16(float(v(i)));
    }
  }
  return h;
}

float at(const TensorView& t, int64_t i) {
  return load_as_f32(t.data, t.dtype, size_t(i));
}

class ThreadCommWorlds : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(ThreadCommWorlds, AllReduceSumIsTheIntegerSumOnEveryRank) {
  const auto [world, dtype] = GetParam();
  const uint32_t seed = testing::test_seed();
  const int64_t rows = 3, cols = 37;
  expect_all_ok(run_world(world, [&](int r, Communicator& c) -> Status {
    HostTensor x = filled(dtype, rows, cols, [&](int64_t i) { return value_at(seed, r, i); });
    HostTensor in_place = filled(dtype, rows, cols, [&](int64_t i) { return value_at(seed, r, i); });
    HostTensor out = HostTensor::zeros(dtype, {rows, cols});
    RILL_TRY(c.all_reduce_sum(x.view, out.view));
    RILL_TRY(c.all_reduce_sum(in_place.view, in_place.view));
    for (int64_t i = 0; i < rows * cols; ++i) {
      int sum = 0;
      for (int q = 0; q < world; ++q) sum += value_at(seed, q, i);
      if (at(out.view, i) != float(sum) || at(in_place.view, i) != float(sum)) {
        return internal_error("rank {} element {}: {} / {} (in place), expected {}", r, i, at(out.view, i),
                              at(in_place.view, i), sum);
      }
    }
    return {};
  }));
}

TEST_P(ThreadCommWorlds, AllGatherAndReduceScatter) {
  const auto [world, dtype] = GetParam();
  const uint32_t seed = testing::test_seed();
  const int64_t rows = 2, cols = 5;
  expect_all_ok(run_world(world, [&](int r, Communicator& c) -> Status {
    HostTensor x = filled(dtype, rows, cols, [&](int64_t i) { return value_at(seed, r, i); });
    HostTensor gathered = HostTensor::zeros(dtype, {rows * world, cols});
    RILL_TRY(c.all_gather(x.view, gathered.view));
    for (int q = 0; q < world; ++q)
      for (int64_t i = 0; i < rows * cols; ++i)
        if (at(gathered.view, q * rows * cols + i) != float(value_at(seed, q, i)))
          return internal_error("all_gather: rank {} sees rank {} element {} wrong", r, q, i);
    // In place: this rank's slice of the output is the input.
    HostTensor inplace = HostTensor::zeros(dtype, {rows * world, cols});
    const TensorView mine = inplace.view.rows(r * rows, rows);
    for (int64_t i = 0; i < rows * cols; ++i)
      std::memcpy(static_cast<uint8_t*>(mine.data) + i * dtype_size(dtype),
                  static_cast<uint8_t*>(x.view.data) + i * dtype_size(dtype), dtype_size(dtype));
    RILL_TRY(c.all_gather(mine, inplace.view));
    if (std::memcmp(inplace.view.data, gathered.view.data, gathered.view.nbytes()) != 0)
      return internal_error("all_gather in place differs on rank {}", r);

    HostTensor big = filled(dtype, rows * world, cols, [&](int64_t i) { return value_at(seed, r, i); });
    HostTensor part = HostTensor::zeros(dtype, {rows, cols});
    RILL_TRY(c.reduce_scatter(big.view, part.view));
    for (int64_t i = 0; i < rows * cols; ++i) {
      int sum = 0;
      for (int q = 0; q < world; ++q) sum += value_at(seed, q, r * rows * cols + i);
      if (at(part.view, i) != float(sum))
        return internal_error("reduce_scatter: rank {} element {}: {}, expected {}", r, i, at(part.view, i),
                              sum);
    }
    return {};
  }));
}

TEST_P(ThreadCommWorlds, AllToAllVWithUnevenSplits) {
  const auto [world, dtype] = GetParam();
  const uint32_t seed = testing::test_seed();
  const int64_t cols = 3;
  // rows(src, dst): 0..3 rows, zeros included; row k from src to dst holds src*1000 + dst*100 + k (exact in
  // f32; in bf16 only small values are exact, so it holds (src + dst * 8 + k) % 64 there).
  auto rows_between = [&](int src, int dst) { return int64_t((seed + src * 31 + dst * 17) % 4); };
  auto value = [&](int src, int dst, int64_t k, int64_t col) {
    return dtype == DType::F32 ? int(src * 1000 + dst * 100 + k * 10 + col)
                               : int((src + dst * 8 + k + col) % 64);
  };
  expect_all_ok(run_world(world, [&](int r, Communicator& c) -> Status {
    std::vector<int64_t> send(world), recv(world);
    int64_t total_send = 0, total_recv = 0;
    for (int j = 0; j < world; ++j) {
      send[j] = rows_between(r, j);
      recv[j] = rows_between(j, r);
      total_send += send[j];
      total_recv += recv[j];
    }
    std::vector<int> in_values;
    for (int j = 0; j < world; ++j)
      for (int64_t k = 0; k < send[j]; ++k)
        for (int64_t col = 0; col < cols; ++col) in_values.push_back(value(r, j, k, col));
    HostTensor in = filled(dtype, std::max<int64_t>(total_send, 1), cols,
                           [&](int64_t i) { return i < int64_t(in_values.size()) ? in_values[i] : 0; });
    HostTensor out = HostTensor::zeros(dtype, {std::max<int64_t>(total_recv, 1), cols});
    RILL_TRY(c.all_to_all_v(in.view, send, out.view, recv));
    int64_t i = 0;
    for (int j = 0; j < world; ++j)
      for (int64_t k = 0; k < recv[j]; ++k)
        for (int64_t col = 0; col < cols; ++col, ++i)
          if (at(out.view, i) != float(value(j, r, k, col)))
            return internal_error("rank {}: row {} from rank {} is {}, expected {}", r, k, j, at(out.view, i),
                                  value(j, r, k, col));
    return {};
  }));
}

TEST_P(ThreadCommWorlds, BroadcastSendRecvAndBarrier) {
  const auto [world, dtype] = GetParam();
  const uint32_t seed = testing::test_seed();
  expect_all_ok(run_world(world, [&](int r, Communicator& c) -> Status {
    for (int root = 0; root < world; ++root) {
      HostTensor x = filled(dtype, 4, 3, [&](int64_t i) { return value_at(seed, r, i); });
      RILL_TRY(c.broadcast(x.view, root));
      for (int64_t i = 0; i < 12; ++i)
        if (at(x.view, i) != float(value_at(seed, root, i)))
          return internal_error("broadcast from {}: rank {} element {} wrong", root, r, i);
      // Host bytes of a length only the root knows.
      std::vector<uint8_t> bytes;
      if (r == root) {
        for (uint32_t k = 0; k < (seed + root) % 50; ++k) bytes.push_back(uint8_t(root * 13 + k));
      }
      RILL_TRY(c.broadcast_bytes(bytes, root));
      if (bytes.size() != (seed + root) % 50)
        return internal_error("broadcast_bytes: rank {} got {} bytes", r, bytes.size());
      for (size_t k = 0; k < bytes.size(); ++k)
        if (bytes[k] != uint8_t(root * 13 + k)) return internal_error("broadcast_bytes: byte {} wrong", k);
    }
    // A ring: every rank sends to the next and receives from the previous (sends are buffered).
    if (world > 1) {
      HostTensor mine = filled(dtype, 2, 2, [&](int64_t i) { return value_at(seed, r, i); });
      HostTensor got = HostTensor::zeros(dtype, {2, 2});
      RILL_TRY(c.send(mine.view, (r + 1) % world));
      RILL_TRY(c.recv(got.view, (r + world - 1) % world));
      for (int64_t i = 0; i < 4; ++i)
        if (at(got.view, i) != float(value_at(seed, (r + world - 1) % world, i)))
          return internal_error("recv: rank {} element {} wrong", r, i);
    }
    return c.barrier();
  }));
}

INSTANTIATE_TEST_SUITE_P(Worlds, ThreadCommWorlds,
                         ::testing::Combine(::testing::Range(1, 9),
                                            ::testing::Values(DType::F32, DType::BF16)),
                         [](const auto& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) == DType::F32 ? "_f32" : "_bf16");
                         });

// bf16: the sum is accumulated in fp32 in rank order and rounded once. Rank 0 holds 1, every other rank 2^-8
// (half a bf16 ulp at 1): rounding each partial sum would stay at 1 (every tie rounds to even), rounding once
// gives 1 + (world-1) * 2^-8 rounded to the 2^-7 grid, ties to even.
TEST(ThreadComm, Bf16SumRoundsOnceInRankOrder) {
  for (int world = 2; world <= 8; ++world) {
    const double exact = 1.0 + (world - 1) * std::ldexp(1.0, -8);
    const double ulps = (exact - 1.0) / std::ldexp(1.0, -7);
    const double rounded =
        std::floor(ulps) +
        ((ulps - std::floor(ulps) > 0.5 || (ulps - std::floor(ulps) == 0.5 && int(std::floor(ulps)) % 2 == 1))
             ? 1
             : 0);
    const float expected = float(1.0 + rounded * std::ldexp(1.0, -7));
    SCOPED_TRACE(::testing::Message() << "world " << world << " expected " << expected);
    expect_all_ok(run_world(world, [&](int r, Communicator& c) -> Status {
      HostTensor x = HostTensor::zeros(DType::BF16, {1});
      x.view.ptr<uint16_t>()[0] = f32_to_bf16(r == 0 ? 1.0f : std::ldexp(1.0f, -8));
      RILL_TRY(c.all_reduce_sum(x.view, x.view));
      if (at(x.view, 0) != expected) return internal_error("rank {}: {}", r, at(x.view, 0));
      return {};
    }));
  }
}

// -0 summed with -0 stays -0 (a sum that starts from +0 would not).
TEST(ThreadComm, NegativeZeroSurvives) {
  expect_all_ok(run_world(3, [&](int r, Communicator& c) -> Status {
    HostTensor x = HostTensor::zeros(DType::F32, {1});
    x.view.ptr<float>()[0] = -0.0f;
    RILL_TRY(c.all_reduce_sum(x.view, x.view));
    if (!std::signbit(x.view.ptr<float>()[0])) return internal_error("rank {}: +0", r);
    return {};
  }));
}

// The groups of a TP 2 x PP 2 x DP 2 mapping at once: TP all-reduces, PP send/recv between stages, EP
// all-gathers over the DP replicas of a stage, each on its own members only.
TEST(ThreadComm, SubGroupsOfAMappingRunConcurrently) {
  const dist::ParallelSizes sizes{8, 2, 4, 2, 2};
  auto hub = ThreadCommHub::make(8);
  std::vector<Status> statuses(8);
  std::vector<std::thread> threads;
  for (int r = 0; r < 8; ++r) {
    threads.emplace_back([&, r] {
      statuses[r] = [&]() -> Status {
        RILL_ASSIGN_OR_RETURN(auto m, dist::Mapping::make(sizes, r));
        RILL_ASSIGN_OR_RETURN(auto tp, hub->communicator(r, m.group(dist::GroupKind::Tp)));
        RILL_ASSIGN_OR_RETURN(auto pp, hub->communicator(r, m.group(dist::GroupKind::Pp)));
        RILL_ASSIGN_OR_RETURN(auto ep, hub->communicator(r, m.group(dist::GroupKind::Ep)));
        for (int step = 0; step < 20; ++step) {
          HostTensor x = HostTensor::zeros(DType::F32, {1});
          x.view.ptr<float>()[0] = float(r * 100 + step);
          RILL_TRY(tp->all_reduce_sum(x.view, x.view));
          float expected = 0;
          for (int q : m.group(dist::GroupKind::Tp)) expected += float(q * 100 + step);
          if (x.view.ptr<float>()[0] != expected)
            return internal_error("tp sum {} != {}", x.view.ptr<float>()[0], expected);

          HostTensor y = HostTensor::zeros(DType::F32, {1});
          if (m.is_first_stage()) {
            y.view.ptr<float>()[0] = float(r + step);
            RILL_TRY(pp->send(y.view, 1));
          } else {
            RILL_TRY(pp->recv(y.view, 0));
            const int sender = m.group(dist::GroupKind::Pp)[0];
            if (y.view.ptr<float>()[0] != float(sender + step))
              return internal_error("pp recv wrong at step {}", step);
          }
          HostTensor g = HostTensor::zeros(DType::F32, {4});
          HostTensor one = HostTensor::zeros(DType::F32, {1});
          one.view.ptr<float>()[0] = float(r);
          RILL_TRY(ep->all_gather(one.view, g.view));
          const auto members = m.group(dist::GroupKind::Ep);
          for (int k = 0; k < 4; ++k)
            if (g.view.ptr<float>()[k] != float(members[k]))
              return internal_error("ep gather wrong at {}", k);
        }
        return {};
      }();
    });
  }
  for (auto& t : threads) t.join();
  expect_all_ok(statuses);
}

TEST(ThreadComm, ARankThatNeverArrivesIsNamedNotWaitedFor) {
  const auto statuses = run_world(
      3,
      [](int r, Communicator& c) -> Status {
        if (r == 2) return {};  // leaves without taking part
        HostTensor x = HostTensor::zeros(DType::F32, {4});
        return c.all_reduce_sum(x.view, x.view);
      },
      ThreadCommOptions{std::chrono::milliseconds(200)});
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(statuses[r].ok());
    EXPECT_NE(statuses[r].message().find("rank 2 did not reach all_reduce_sum"), std::string::npos)
        << statuses[r].message();
  }
}

TEST(ThreadComm, AFailedRankEndsTheOthersWaitsWithItsReason) {
  auto hub = ThreadCommHub::make(2);  // the default timeout: only fail() can end rank 0's wait in time
  std::vector<Status> statuses(2);
  std::thread t0([&] {
    auto c = hub->communicator(0, {0, 1});
    HostTensor x = HostTensor::zeros(DType::F32, {4});
    statuses[0] = c.ok() ? (*c)->all_reduce_sum(x.view, x.view) : c.status();
  });
  std::thread t1([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    hub->fail(1, "bad slice of layers.0.mlp.down_proj");
  });
  t0.join();
  t1.join();
  ASSERT_FALSE(statuses[0].ok());
  EXPECT_NE(statuses[0].message().find("rank 1 failed: bad slice"), std::string::npos)
      << statuses[0].message();
  EXPECT_FALSE(hub->status().ok());
  // Later calls fail at once.
  auto c = hub->communicator(0, {0, 1});
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE((*c)->barrier().ok());
}

TEST(ThreadComm, RanksOutOfStepAreReported) {
  const auto statuses = run_world(2, [](int r, Communicator& c) -> Status {
    HostTensor x = HostTensor::zeros(DType::F32, {2});
    HostTensor g = HostTensor::zeros(DType::F32, {4});
    return r == 0 ? c.all_reduce_sum(x.view, x.view) : c.all_gather(x.view, g.view);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(statuses[r].ok());
    EXPECT_NE(statuses[r].message().find("out of step"), std::string::npos) << statuses[r].message();
  }
}

TEST(ThreadComm, ARecvWithoutASendTimesOutNamingTheSender) {
  const auto statuses = run_world(
      2,
      [](int r, Communicator& c) -> Status {
        if (r == 1) return {};
        HostTensor x = HostTensor::zeros(DType::F32, {2});
        return c.recv(x.view, 1);
      },
      ThreadCommOptions{std::chrono::milliseconds(100)});
  ASSERT_FALSE(statuses[0].ok());
  EXPECT_NE(statuses[0].message().find("rank 1 sent nothing to rank 0"), std::string::npos)
      << statuses[0].message();
}

TEST(ThreadComm, ChecksArguments) {
  expect_all_ok(run_world(2, [](int r, Communicator& c) -> Status {
    HostTensor x = HostTensor::zeros(DType::I32, {2});
    HostTensor y = HostTensor::zeros(DType::F32, {3});
    HostTensor z = HostTensor::zeros(DType::F32, {2});
    if (c.all_reduce_sum(x.view, x.view).ok()) return internal_error("I32 sum accepted");
    if (c.all_gather(z.view, y.view).ok()) return internal_error("all_gather into 3 rows of 2 x 2 accepted");
    if (c.send(z.view, r).ok()) return internal_error("send to self accepted");
    if (c.broadcast(z.view, 2).ok()) return internal_error("root 2 of 2 accepted");
    const std::vector<int64_t> counts{2, 2};
    if (c.all_to_all_v(z.view, counts, z.view, counts).ok()) return internal_error("4 rows from 2 accepted");
    return {};
  }));
  auto hub = ThreadCommHub::make(4);
  EXPECT_FALSE(hub->communicator(0, {1, 2}).ok());
  EXPECT_FALSE(hub->communicator(1, {2, 1}).ok());
  EXPECT_FALSE(hub->communicator(4, {0, 4}).ok());
}

}  // namespace
}  // namespace rill::backend
