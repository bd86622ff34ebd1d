// CpuBackend memory plumbing: host memory stands in for device memory, copies are memcpy.
#include "backend/cpu/cpu_backend.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

#include "core/rng.h"
#include "core/sizes.h"

namespace rill::backend {

Result<DeviceAllocation> CpuBackend::allocate(size_t bytes) {
  try {
    auto buf = std::make_shared<HostBuffer>(bytes);
    void* p = buf->data();
    return DeviceAllocation(p, bytes, std::move(buf));
  } catch (const std::bad_alloc&) {  // callers check available_memory() first; this is the last resort
    return resource_exhausted("cannot allocate {} of host memory for the cpu backend",
                              format_bytes(double(bytes)));
  }
}

std::optional<size_t> CpuBackend::available_memory() const {
  return host_available_memory();
}

Status CpuBackend::copy_to_device(void* dst, const void* host_src, size_t bytes) {
  std::memcpy(dst, host_src, bytes);
  return {};
}

Status CpuBackend::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  std::memcpy(host_dst, src, bytes);
  return {};
}

Status CpuBackend::copy_device_to_device(void* dst, const void* src, size_t bytes) {
  std::memmove(dst, src, bytes);
  return {};
}

Status CpuBackend::fill_zero(TensorView t) {
  if (!t.is_contiguous()) return internal_error("fill_zero: view {} is not contiguous", t.describe());
  std::memset(t.data, 0, t.nbytes());
  return {};
}

Status CpuBackend::fill_random(TensorView t, uint64_t seed, float lo, float hi) {
  if (!t.is_contiguous()) return internal_error("fill_random: view {} is not contiguous", t.describe());
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float u = uniform01(seed, uint64_t(i));
    switch (t.dtype) {
      case DType::F32: t.ptr<float>()[i] = lo + (hi - lo) * u; break;
      case DType::BF16: t.ptr<uint16_t>()[i] = f32_to_bf16(lo + (hi - lo) * u); break;
      case DType::F16: t.ptr<uint16_t>()[i] = f32_to_f16(lo + (hi - lo) * u); break;
      case DType::U8: t.ptr<uint8_t>()[i] = uint8_t(lo + std::floor((hi - lo + 1) * u)); break;
      default: return internal_error("fill_random: unsupported dtype {}", dtype_name(t.dtype));
    }
  }
  return {};
}

Status CpuBackend::upload_layout(const BatchLayoutHost& host, int block_size, BatchLayout* out) {
  BatchLayout& l = *out;
  l = layout_scalars(host, block_size);  // the CPU reads the host arrays directly
  l.seq_token_start = host.seq_token_start.data();
  l.seq_start_pos = host.seq_start_pos.data();
  l.seq_state_slot = host.seq_state_slot.data();
  l.seq_kda_records = host.seq_kda_records.data();
  l.block_tables = host.block_tables.data();
  l.token_seq = host.token_seq.data();
  l.token_pos = host.token_pos.data();
  if (!host.kda_snapshots.empty())
    l.kda_snapshots = {host.kda_snapshots.seq_begin.data(), host.kda_snapshots.requests.data(),
                       int(host.kda_snapshots.requests.size())};
  return {};
}

Status CpuBackend::upload_async(void* dst, const void* host_src, size_t bytes) {
  std::memcpy(dst, host_src, bytes);
  return {};
}

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace rill::backend
