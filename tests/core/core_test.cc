// core/: exact dtype conversions against closed-form values, views, the arena, the thread pool, the RNG.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "core/arena.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace rill {
namespace {

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(round_to_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);  // halfway: ties to even (down)
  EXPECT_EQ(round_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));  // halfway: up to even
  EXPECT_EQ(round_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-INFINITY)), -INFINITY);
  for (uint32_t b = 0; b < 65536; ++b) {  // every finite bf16 survives f32 and back
    const float f = bf16_to_f32(uint16_t(b));
    if (!std::isnan(f)) {
      EXPECT_EQ(f32_to_bf16(f), b);
    }
  }
}

TEST(DType, F16RoundTripsEveryValue) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = f16_to_f32(uint16_t(b));
    if (!std::isnan(f)) {
      EXPECT_EQ(f32_to_f16(f), b) << b;
    }
  }
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // rounds to infinity
}

TEST(DType, F8E4M3Values) {
  EXPECT_EQ(f8e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(f8e4m3_to_f32(0xB8), -1.0f);
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7F)));
}

TEST(DType, NamesRoundTrip) {
  for (DType t : {DType::BF16, DType::F16, DType::F32, DType::F8E4M3, DType::U8, DType::I8, DType::I32, DType::I64,
                  DType::Bool})
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  EXPECT_FALSE(dtype_from_name("F64").has_value());
}

TEST(Tensor, NarrowAndReshape) {
  HostTensor t = HostTensor::zeros(DType::F32, {4, 6});
  for (int i = 0; i < 24; ++i) t.view.ptr<float>()[i] = float(i);
  TensorView cols = t.view.narrow(1, 2, 3);
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(cols.ptr<float>()[cols.stride(0)], 8.0f);
  EXPECT_EQ(t.view.reshape({2, 12}).size(1), 12);
  EXPECT_EQ(t.view.rows(1, 2).ptr<float>()[0], 6.0f);
  EXPECT_EQ(t.view.describe(), "F32[4, 6]");
}

TEST(Arena, AlignsMeasuresAndReleases) {
  Arena measure(nullptr, 0, Device::Cpu);
  measure.alloc(DType::F32, {3});
  measure.alloc(DType::BF16, {1000});
  EXPECT_EQ(measure.high_water(), 256u + 2048u);
  HostBuffer buf(4096);
  Arena a(buf.data(), 4096, Device::Cpu);
  TensorView x = a.alloc(DType::F32, {3});
  const size_t mark = a.used();
  TensorView y = a.alloc(DType::F32, {3});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(y.data) % 256, 0u);
  EXPECT_NE(x.data, y.data);
  a.release_to(mark);
  EXPECT_EQ(a.alloc(DType::F32, {3}).data, y.data);
}

TEST(ThreadPool, CoversTheRangeExactlyOnce) {
  ThreadPool pool(4);
  for (int64_t n : {0, 1, 3, 7, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, 5, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

// Two threads calling parallel_for at once (two CPU engines in one process) each get their whole range: the
// calls take turns instead of one overwriting the other's job (which used to hang).
TEST(ThreadPool, ConcurrentCallersEachCoverTheirRange) {
  ThreadPool pool(4);
  constexpr int64_t kN = 20000;
  std::vector<std::atomic<int>> a(kN), b(kN);
  auto run = [&](std::vector<std::atomic<int>>& hits) {
    for (int rep = 0; rep < 200; ++rep)
      pool.parallel_for(kN, 64, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) hits[size_t(i)]++;
      });
  };
  std::thread ta([&] { run(a); }), tb([&] { run(b); });
  ta.join();
  tb.join();
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(a[size_t(i)].load(), 200) << i;
    ASSERT_EQ(b[size_t(i)].load(), 200) << i;
  }
}

TEST(Rng, UniformIsDeterministicAndInRange) {
  double sum = 0;
  for (uint64_t i = 0; i < 100000; ++i) {
    const float u = uniform01(42, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    EXPECT_EQ(u, uniform01(42, i));
    sum += u;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);  // mean of U(0,1); 5 sigma is ~0.0046
  EXPECT_NE(uniform01(42, 7), uniform01(43, 7));
}

TEST(Status, ContextAndTry) {
  auto f = []() -> Status {
    RILL_TRY(invalid_argument("bad {}", 3));
    return {};
  };
  const Status s = f().with_context("loading");
  EXPECT_EQ(s.message(), "loading: bad 3");
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
}

}  // namespace
}  // namespace rill
