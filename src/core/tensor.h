// TensorView: a non-owning view (pointer, dtype, shape, strides, device); HostBuffer: owned host memory.
// Device memory is owned by the backend (allocated once at start-up); everything else passes views.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#if __cplusplus >= 202002L
#include <span>
#endif
#include <string>

#include "core/dtype.h"

namespace rill {

enum class Device : uint8_t { Cpu, Cuda };
const char* device_name(Device d);

inline constexpr int kMaxRank = 5;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  Shape(const int64_t* dims, int rank);
#if __cplusplus >= 202002L  // .cu files compile as C++17 (CMakeLists.txt)
  explicit Shape(std::span<const int64_t> dims) : Shape(dims.data(), int(dims.size())) {}
#endif

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  int64_t numel() const;
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + rank_; }
  std::string to_string() const;  // "[4096, 2304]"
  bool operator==(const Shape& o) const;

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  Shape shape;
  std::array<int64_t, kMaxRank> strides{};  // in elements
  Device device = Device::Cpu;

  // A contiguous row-major view.
  static TensorView make(void* data, DType dtype, Shape shape, Device device = Device::Cpu);

  bool empty() const { return data == nullptr; }
  int rank() const { return shape.rank(); }
  int64_t size(int dim) const { return shape[dim < 0 ? dim + rank() : dim]; }
  int64_t stride(int dim) const { return strides[dim < 0 ? dim + rank() : dim]; }
  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  bool is_contiguous() const;

  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }

  // Sub-range [start, start+length) of dimension `dim`; keeps strides (may become non-contiguous).
  TensorView narrow(int dim, int64_t start, int64_t length) const;
  // Same memory, new shape; only for contiguous views.
  TensorView reshape(Shape new_shape) const;
  // Rows [start, start+n) of dimension 0.
  TensorView rows(int64_t start, int64_t n) const { return narrow(0, start, n); }

  std::string describe() const;  // "BF16[4096, 2304]"
};

// Owned, 256-byte aligned host memory.
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(size_t nbytes);
  HostBuffer(HostBuffer&&) noexcept = default;
  HostBuffer& operator=(HostBuffer&&) noexcept = default;

  void* data() const { return ptr_.get(); }
  size_t size() const { return size_; }
  TensorView view(DType dtype, Shape shape) const;

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> ptr_;
  size_t size_ = 0;
};

// A host tensor that owns its memory: the buffer and a contiguous view of it.
struct HostTensor {
  HostBuffer buffer;
  TensorView view;
  static HostTensor zeros(DType dtype, Shape shape);
};

}  // namespace rill
