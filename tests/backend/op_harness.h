// Cross-backend op tests (style.md §7.8): the same op runs on the CPU reference and on the backend under
// test with the same inputs (activations rounded to bf16 first, so both see identical values); outputs of
// the tested backend are poisoned with NaN beforehand so unwritten elements fail.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/step_batch.h"

namespace rill::testing {

// A tensor living on one backend, created from host f32 values.
struct BackendTensor {
  backend::DeviceAllocation alloc;
  TensorView view;
};

class OpHarness {
 public:
  // Skips the test (GTEST_SKIP in the caller) when `tested` cannot be created: check ok() first.
  explicit OpHarness(const std::string& tested);
  bool ok() const { return tested_ != nullptr; }
  const std::string& skip_reason() const { return skip_reason_; }

  backend::Backend& cpu() { return *cpu_; }
  backend::Backend& dev() { return *tested_; }
  std::mt19937& rng() { return rng_; }
  uint32_t seed() const { return seed_; }

  // Host values: N(0, scale), rounded to bf16 when `act` so the CPU and bf16 backends agree on inputs.
  std::vector<float> randn(int64_t n, float scale = 1.0f, bool round_bf16 = true);
  std::vector<float> uniform(int64_t n, float lo, float hi, bool round_bf16 = true);

  // `values` placed on `be` with dtype `dtype` (converted from f32).
  BackendTensor put(backend::Backend& be, const std::vector<float>& values, DType dtype, Shape shape);
  // Same on both backends: the CPU copy in F32 (or `dtype` when not an activation), the tested one in dtype.
  std::pair<BackendTensor, BackendTensor> put_both(const std::vector<float>& values, DType cpu_dtype,
                                                    DType dev_dtype, Shape shape);
  // An output on `be`, NaN-poisoned.
  BackendTensor empty(backend::Backend& be, DType dtype, Shape shape);
  std::vector<float> get(backend::Backend& be, const TensorView& t);

  // Layout of a batch on each backend (the host description must outlive the layouts).
  void layouts(const model::StepBatch& batch, int block_size, backend::BatchLayout* cpu_layout,
               backend::BatchLayout* dev_layout);

 private:
  std::unique_ptr<backend::Backend> cpu_, tested_;
  std::string skip_reason_;
  uint32_t seed_;
  std::mt19937 rng_;
  backend::BatchLayoutHost host_layout_;
};

// ||a - b|| / ||b|| (NaN anywhere -> infinity).
double rel_l2(const std::vector<float>& a, const std::vector<float>& b);
double max_abs(const std::vector<float>& a, const std::vector<float>& b);

// Use at the top of a test: `RILL_REQUIRE_BACKEND(h)` skips when the backend is unavailable.
#define RILL_REQUIRE_BACKEND(h) \
  if (!(h).ok()) GTEST_SKIP() << (h).skip_reason()

// The backends op tests run on (the CPU reference is the oracle, so only accelerators are listed).
inline std::vector<std::string> tested_backends() { return {"cuda"}; }

}  // namespace rill::testing
