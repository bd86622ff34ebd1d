// Shared pieces of the CPU-backend op tests (each against an fp64 oracle written in its test from the spec):
// the CPU backend through OpHarness (its seed and random inputs, tensors, layouts), a ragged step builder,
// and comparisons of the op's fp32 outputs against fp64 values.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/op_harness.h"
#include "model/step_batch.h"

namespace rill::testing {

// OpHarness over the CPU backend alone: its "tested" backend is a second CPU instance these tests leave
// unused.
inline constexpr const char* kCpuOnly = "cpu";

// One sequence of a step: `n_new` tokens after `start_pos` cached ones, its KDA state slot and its MLA block
// table (positions [0, start_pos + n_new); may be left empty where the op reads none).
struct StepSeq {
  int start_pos = 0, n_new = 1, slot = 0;
  std::vector<int32_t> blocks = {};
  std::vector<model::KdaSnapshotRequest> snapshots = {};
};

model::StepBatch make_step(const std::vector<StepSeq>& seqs, int block_size);

// The CPU layout of `batch`; it points into the harness's host layout, valid until the next call.
backend::BatchLayout cpu_layout(OpHarness& h, const model::StepBatch& batch, int block_size);

inline double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

std::vector<float> slice(const std::vector<float>& v, size_t begin, size_t n);
std::vector<double> slice(const std::vector<double>& v, size_t begin, size_t n);

// ||got - want|| / ||want|| with the oracle in double (NaN anywhere -> infinity).
double rel_l2(const std::vector<float>& got, const std::vector<double>& want);

// Every element within rel * max(|want|, floor) of the oracle; the message names the worst element.
::testing::AssertionResult elementwise_near(const std::vector<float>& got, const std::vector<double>& want,
                                            double rel, double floor);

}  // namespace rill::testing
