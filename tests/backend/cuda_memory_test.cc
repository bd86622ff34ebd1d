// The CUDA backend's memory plumbing (src/backend/cuda/cuda_backend.cc): allocate, blocking copies both ways,
// device-to-device copies, fill_zero, upload_async through the pinned staging ring (small uploads that wrap
// the ring many times, and uploads larger than half of it, which take the blocking path), and upload_layout.
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "backend/op_harness.h"

namespace rill::testing {
namespace {

std::vector<uint8_t> random_bytes(OpHarness& h, size_t n) {
  std::uniform_int_distribution<int> d(0, 255);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(d(h.rng()));
  return v;
}

std::vector<uint8_t> read_back(backend::Backend& be, const void* src, size_t n) {
  std::vector<uint8_t> v(n);
  EXPECT_TRUE(be.synchronize().ok());
  EXPECT_TRUE(be.copy_to_host(v.data(), src, n).ok());
  return v;
}

// Index of the first differing byte, or -1 (gtest would print megabytes for a vector comparison).
int64_t first_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return int64_t(i);
  return -1;
}

class CudaMemoryTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaMemoryTest, CopiesRoundTrip) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  backend::Backend& be = h.dev();
  for (size_t n : {size_t(1), size_t(4097), size_t(9) << 20}) {
    SCOPED_TRACE(::testing::Message() << n << " bytes");
    const std::vector<uint8_t> src = random_bytes(h, n);
    auto a = be.allocate(n), b = be.allocate(n);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_TRUE(be.copy_to_device(a->data(), src.data(), n).ok());
    EXPECT_EQ(first_diff(read_back(be, a->data(), n), src), -1);
    ASSERT_TRUE(be.copy_device_to_device(b->data(), a->data(), n).ok());
    EXPECT_EQ(first_diff(read_back(be, b->data(), n), src), -1);
    ASSERT_TRUE(be.fill_zero(TensorView::make(b->data(), DType::U8, {int64_t(n)}, Device::Cuda)).ok());
    EXPECT_EQ(first_diff(read_back(be, b->data(), n), std::vector<uint8_t>(n, 0)), -1);
  }
}

TEST_P(CudaMemoryTest, FillZeroRefusesStridedViews) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  auto a = h.dev().allocate(64 * 4);
  ASSERT_TRUE(a.ok());
  const TensorView t = TensorView::make(a->data(), DType::F32, {8, 8}, Device::Cuda).narrow(1, 0, 4);
  EXPECT_FALSE(h.dev().fill_zero(t).ok());
}

// Many uploads in a row without a sync: each must land intact although the ring's halves are reused, and the
// host buffer may be overwritten as soon as upload_async returns.
TEST_P(CudaMemoryTest, UploadAsyncThroughTheStagingRing) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  backend::Backend& be = h.dev();
  const std::vector<size_t> sizes = {4, 1000, 300000, 65536, 3 << 20, 5 << 20, 12345, 1 << 20};
  std::vector<backend::DeviceAllocation> dst;
  std::vector<std::vector<uint8_t>> want;
  std::vector<uint8_t> host;
  for (int round = 0; round < 6; ++round)
    for (size_t n : sizes) {
      want.push_back(random_bytes(h, n));
      host = want.back();  // the same host buffer reused for every upload
      auto a = be.allocate(n);
      ASSERT_TRUE(a.ok());
      ASSERT_TRUE(be.upload_async(a->data(), host.data(), n).ok());
      std::fill(host.begin(), host.end(), uint8_t(0xAB));
      dst.push_back(std::move(a).value());
    }
  ASSERT_TRUE(be.synchronize().ok());
  for (size_t i = 0; i < dst.size(); ++i)
    EXPECT_EQ(first_diff(read_back(be, dst[i].data(), want[i].size()), want[i]), -1) << "upload " << i;
}

TEST_P(CudaMemoryTest, UploadLayoutMirrorsTheHostArrays) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  backend::Backend& be = h.dev();
  for (int n_seqs : {1, 3, 200}) {
    SCOPED_TRACE(::testing::Message() << n_seqs << " sequences");
    backend::BatchLayoutHost host;
    host.max_blocks_per_seq = 5;
    host.seq_token_start.push_back(0);
    for (int s = 0; s < n_seqs; ++s) {
      const int n_new = 1 + (s * 7) % 13, start = (s * 31) % 200;
      host.seq_start_pos.push_back(start);
      host.seq_state_slot.push_back(n_seqs - 1 - s);
      for (int b = 0; b < host.max_blocks_per_seq; ++b) host.block_tables.push_back(b < 2 ? s * 5 + b : -1);
      for (int i = 0; i < n_new; ++i) {
        host.token_seq.push_back(s);
        host.token_pos.push_back(start + i);
      }
      host.seq_token_start.push_back(host.seq_token_start.back() + n_new);
    }
    backend::BatchLayout dev;
    ASSERT_TRUE(be.upload_layout(host, 64, &dev).ok());
    EXPECT_EQ(dev.n_seqs, n_seqs);
    EXPECT_EQ(dev.n_tokens, host.n_tokens());
    EXPECT_EQ(dev.block_size, 64);
    EXPECT_EQ(dev.host, &host);
    auto check = [&](const int32_t* p, const std::vector<int32_t>& v, const char* name) {
      std::vector<int32_t> got(v.size());
      ASSERT_TRUE(be.synchronize().ok());
      ASSERT_TRUE(be.copy_to_host(got.data(), p, v.size() * 4).ok());
      EXPECT_EQ(got, v) << name;
    };
    check(dev.seq_token_start, host.seq_token_start, "seq_token_start");
    check(dev.seq_start_pos, host.seq_start_pos, "seq_start_pos");
    check(dev.seq_state_slot, host.seq_state_slot, "seq_state_slot");
    check(dev.block_tables, host.block_tables, "block_tables");
    check(dev.token_seq, host.token_seq, "token_seq");
    check(dev.token_pos, host.token_pos, "token_pos");
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CudaMemoryTest, ::testing::ValuesIn(tested_backends()));

}  // namespace
}  // namespace rill::testing
