#include "model/taps.h"

#include <cstring>

namespace rill::model {

void TapRecorder::record(backend::Backend& be, std::string name, const TensorView& v) {
  if (be.plans_only() || v.data == nullptr || !v.is_contiguous()) return;
  if (auto it = overrides_.find(name); it != overrides_.end() && int64_t(it->second.size()) == v.numel()) {
    std::vector<char> bytes(v.nbytes());
    for (size_t i = 0; i < it->second.size(); ++i) {
      const float x = it->second[i];
      switch (v.dtype) {
        case DType::F32: std::memcpy(&bytes[i * 4], &x, 4); break;
        case DType::I32: {
          const int32_t k = int32_t(x);
          std::memcpy(&bytes[i * 4], &k, 4);
          break;
        }
        case DType::BF16: {
          const uint16_t b = f32_to_bf16(x);
          std::memcpy(&bytes[i * 2], &b, 2);
          break;
        }
        default: return;  // only the dtypes routing uses are replayed
      }
    }
    if (!be.copy_to_device(v.data, bytes.data(), bytes.size()).ok()) return;
  } else if (round_bf16_ && v.dtype == DType::F32 && round_bf16_(name)) {
    std::vector<float> x(size_t(v.numel()));
    if (!be.copy_to_host(x.data(), v.data, v.nbytes()).ok()) return;
    for (float& f : x) f = bf16_to_f32(f32_to_bf16(f));
    if (!be.copy_to_device(v.data, x.data(), v.nbytes()).ok()) return;
  }
  Tap t{std::move(name), v.shape, v.dtype, {}};
  std::vector<char> host(v.nbytes());
  if (!be.copy_to_host(host.data(), v.data, host.size()).ok()) return;
  t.values.resize(static_cast<size_t>(v.numel()));
  for (size_t i = 0; i < t.values.size(); ++i) t.values[i] = load_as_f32(host.data(), v.dtype, i);
  taps_.push_back(std::move(t));
}

}  // namespace rill::model
