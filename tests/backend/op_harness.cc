#include "backend/op_harness.h"
#include "test_backend_options.h"
#include "test_seed.h"

#include <cmath>
#include <cstring>

namespace rill::testing {

OpHarness::OpHarness(const std::string& tested) : seed_(rill::testing::test_seed()), rng_(seed_) {
  cpu_ = backend::make_cpu_backend();
  auto b = testing::make_test_backend(tested);
  if (b.ok()) tested_ = std::move(b).value();
  else skip_reason_ = "backend " + tested + " unavailable: " + b.status().message();
  ::testing::Test::RecordProperty("seed", std::to_string(seed_));
  std::printf("[ seed     ] %u\n", seed_);
}

std::vector<float> OpHarness::randn(int64_t n, float scale, bool round_bf16) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = round_bf16 ? round_to_bf16(d(rng_)) : d(rng_);
  return v;
}

std::vector<float> OpHarness::uniform(int64_t n, float lo, float hi, bool round_bf16) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = round_bf16 ? round_to_bf16(d(rng_)) : d(rng_);
  return v;
}

BackendTensor OpHarness::put(backend::Backend& be, const std::vector<float>& values, DType dtype, Shape shape) {
  EXPECT_EQ(int64_t(values.size()), shape.numel());
  BackendTensor t;
  auto a = be.allocate(size_t(shape.numel()) * dtype_size(dtype));
  EXPECT_TRUE(a.ok());
  t.alloc = std::move(a).value();
  t.view = TensorView::make(t.alloc.data(), dtype, shape, be.device());
  std::vector<char> host(size_t(shape.numel()) * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case DType::F32: reinterpret_cast<float*>(host.data())[i] = values[i]; break;
      case DType::BF16: reinterpret_cast<uint16_t*>(host.data())[i] = f32_to_bf16(values[i]); break;
      case DType::F16: reinterpret_cast<uint16_t*>(host.data())[i] = f32_to_f16(values[i]); break;
      case DType::I32: reinterpret_cast<int32_t*>(host.data())[i] = int32_t(values[i]); break;
      case DType::U8: reinterpret_cast<uint8_t*>(host.data())[i] = uint8_t(values[i]); break;
      default: ADD_FAILURE() << "put: unsupported dtype"; break;
    }
  }
  EXPECT_TRUE(be.copy_to_device(t.view.data, host.data(), host.size()).ok());
  return t;
}

std::pair<BackendTensor, BackendTensor> OpHarness::put_both(const std::vector<float>& values, DType cpu_dtype,
                                                             DType dev_dtype, Shape shape) {
  return {put(*cpu_, values, cpu_dtype, shape), put(*tested_, values, dev_dtype, shape)};
}

BackendTensor OpHarness::empty(backend::Backend& be, DType dtype, Shape shape) {
  const std::vector<float> nan(static_cast<size_t>(shape.numel()), NAN);
  if (dtype == DType::I32 || dtype == DType::U8) {
    std::vector<float> junk(static_cast<size_t>(shape.numel()), -77.0f);
    return put(be, junk, dtype, shape);
  }
  return put(be, nan, dtype, shape);
}

std::vector<float> OpHarness::get(backend::Backend& be, const TensorView& t) {
  std::vector<char> host(t.nbytes());
  EXPECT_TRUE(be.synchronize().ok());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_TRUE(be.copy_to_host(host.data(), t.data, host.size()).ok());
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_f32(host.data(), t.dtype, i);
  return out;
}

void OpHarness::layouts(const model::StepBatch& batch, int block_size, backend::BatchLayout* cpu_layout,
                        backend::BatchLayout* dev_layout) {
  ASSERT_TRUE(batch.to_layout(block_size, &host_layout_).ok());
  ASSERT_TRUE(cpu_->upload_layout(host_layout_, block_size, cpu_layout).ok());
  ASSERT_TRUE(tested_->upload_layout(host_layout_, block_size, dev_layout).ok());
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

double max_abs(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - b[i]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

}  // namespace rill::testing
