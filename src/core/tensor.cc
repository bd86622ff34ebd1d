#include "core/tensor.h"

#include <cassert>
#include <cstdlib>
#include <cstring>
#include <new>

#include <fmt/format.h>

namespace rill {

const char* device_name(Device d) {
  switch (d) {
    case Device::Cpu: return "cpu";
    case Device::Cuda: return "cuda";
  }
  return "?";
}

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(dims.begin(), int(dims.size())) {}

Shape::Shape(const int64_t* dims, int rank) {
  assert(rank <= kMaxRank);
  rank_ = rank;
  for (int i = 0; i < rank_; ++i) dims_[i] = dims[i];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) s += fmt::format("{}{}", i ? ", " : "", dims_[i]);
  return s + "]";
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

TensorView TensorView::make(void* data, DType dtype, Shape shape, Device device) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.shape = shape;
  v.device = device;
  int64_t s = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    v.strides[i] = s;
    s *= shape[i];
  }
  return v;
}

bool TensorView::is_contiguous() const {
  int64_t s = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != s) return false;
    s *= shape[i];
  }
  return true;
}

TensorView TensorView::narrow(int dim, int64_t start, int64_t length) const {
  if (dim < 0) dim += rank();
  assert(start >= 0 && start + length <= shape[dim]);
  TensorView v = *this;
  v.data = static_cast<char*>(data) + start * strides[dim] * int64_t(dtype_size(dtype));
  v.shape[dim] = length;
  return v;
}

TensorView TensorView::reshape(Shape new_shape) const {
  assert(is_contiguous() && new_shape.numel() == numel());
  return make(data, dtype, new_shape, device);
}

std::string TensorView::describe() const { return fmt::format("{}{}", dtype_name(dtype), shape.to_string()); }

void HostBuffer::Free::operator()(void* p) const { std::free(p); }

HostBuffer::HostBuffer(size_t nbytes) : size_(nbytes) {
  // 256-byte alignment, like cudaMalloc, so arena views are equally aligned on every backend.
  const size_t rounded = (nbytes + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded ? rounded : 256);
  if (!p) throw std::bad_alloc();
  ptr_.reset(p);
}

TensorView HostBuffer::view(DType dtype, Shape shape) const {
  assert(size_t(shape.numel()) * dtype_size(dtype) <= size_);
  return TensorView::make(data(), dtype, shape, Device::Cpu);
}

HostTensor HostTensor::zeros(DType dtype, Shape shape) {
  HostTensor t;
  t.buffer = HostBuffer(size_t(shape.numel()) * dtype_size(dtype));
  std::memset(t.buffer.data(), 0, t.buffer.size());
  t.view = t.buffer.view(dtype, shape);
  return t;
}

}  // namespace rill
