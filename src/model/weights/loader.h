// Loads a WeightTable from a checkpoint onto a backend: check everything first, then allocate once, then
// copy (converting dtypes on the host where the backend wants another one). On the CPU, tensors already in a
// usable dtype stay zero-copy views into the mmap'd files.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "io/checkpoint.h"
#include "model/weights/weight_table.h"

namespace rill::model {

struct LoadedWeights {
  std::shared_ptr<const io::Checkpoint> checkpoint;  // keeps zero-copy views alive
  std::vector<backend::DeviceAllocation> storage;
  int64_t device_bytes = 0;
};

// Every missing, unexpected and mis-shaped (or wrongly typed) tensor, in one error.
Status check_weights(const WeightTable& table, const io::Checkpoint& checkpoint);

// progress(done_bytes, total_bytes) is called as tensors are copied.
using LoadProgress = std::function<void(int64_t, int64_t)>;

Result<LoadedWeights> load_weights(const WeightTable& table, std::shared_ptr<const io::Checkpoint> checkpoint,
                                   backend::Backend& backend, const LoadProgress& progress = {});

// Fills every destination of the table with seeded random values on the backend (no checkpoint): the
// `--load-format dummy` path for benchmarks at full size. Matrices ~ N(0, 1/in_features); vectors near 1;
// MXFP4 payloads with uniform random FP4 codes and E8M0 scales of dummy_mxfp4_scale (e - 1 or e).
Result<LoadedWeights> load_dummy_weights(const WeightTable& table, backend::Backend& backend, uint64_t seed);

// The biased E8M0 exponent e that gives MXFP4 weights with uniform random codes the variance of the dense
// dummy matrices, 1 / fan_in, so activations stay O(1) in bf16: 120 for K3's 3584- and 3072-wide expert inputs
// (the released checkpoint's scales are ~112-122, spec §2.4).
int dummy_mxfp4_scale(int64_t fan_in);

}  // namespace rill::model
