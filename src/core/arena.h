// Arena: a bump allocator over one pre-allocated region (host or device). The forward pass carves every
// intermediate tensor from the step workspace and resets it after the step, so a step allocates nothing.
#pragma once

#include <cstddef>

#include "core/tensor.h"

namespace rill {

class Arena {
 public:
  Arena() = default;
  // base == nullptr makes a measuring arena: it hands out null views and only records the high-water mark.
  Arena(void* base, size_t capacity, Device device) : base_(static_cast<char*>(base)), capacity_(capacity),
                                                     device_(device) {}

  // A contiguous view of `shape`, 256-byte aligned. Aborts when the arena is exhausted: workspace sizes are
  // planned from the configured limits, so running out is a bug, not a user error.
  TensorView alloc(DType dtype, Shape shape);
  static constexpr size_t kAlign = 256;
  // The arena bytes an allocation of `bytes` takes (a scratch the backend's const query sizes).
  static constexpr size_t footprint(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
  void reset() { used_ = 0; }
  size_t used() const { return used_; }
  size_t high_water() const { return high_water_; }
  size_t capacity() const { return capacity_; }
  bool measuring() const { return base_ == nullptr; }

  // Restores the arena to an earlier `used()` mark (scoped scratch inside one op sequence).
  void release_to(size_t mark) { used_ = mark; }

 private:
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t high_water_ = 0;
  Device device_ = Device::Cpu;
};

}  // namespace rill
