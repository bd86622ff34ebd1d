#include "model/weights/loader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <atomic>
#include <map>
#include <mutex>
#include <set>


namespace rill::model {
namespace {

bool dtype_ok(WeightRole role, DType t) {
  switch (role) {
    case WeightRole::Matrix: return t == DType::BF16 || t == DType::F16 || t == DType::F32;
    case WeightRole::Vector: return t == DType::BF16 || t == DType::F16 || t == DType::F32;
    case WeightRole::Packed: return t == DType::U8;
  }
  return false;
}

const char* role_dtypes(WeightRole role) {
  switch (role) {
    case WeightRole::Matrix: return "BF16, F16 or F32";
    case WeightRole::Vector: return "BF16, F16 or F32";
    case WeightRole::Packed: return "U8";
  }
  return "?";
}

bool shape_ok(const WeightSpec& s, const Shape& stored) {
  if (stored == s.shape) return true;
  return std::any_of(s.alt_shapes.begin(), s.alt_shapes.end(), [&](const Shape& a) { return a == stored; });
}

// The dtype a tensor of `role` takes on `backend`, given the dtype it is stored in.
DType target_dtype(WeightRole role, DType stored, const backend::Backend& be) {
  switch (role) {
    case WeightRole::Matrix: return be.matrix_dtype().value_or(stored);
    case WeightRole::Vector: return DType::F32;
    case WeightRole::Packed: return stored;
  }
  return stored;
}

// Writes `n` elements of `src` (float dtype) into `dst` as `to`; identical dtypes are a plain copy.
void convert(const void* src, DType from, void* dst, DType to, int64_t n) {
  if (from == to) {
    std::memcpy(dst, src, size_t(n) * dtype_size(to));
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = load_as_f32(src, from, size_t(i));
    switch (to) {
      case DType::F32: static_cast<float*>(dst)[i] = v; break;
      case DType::BF16: static_cast<uint16_t*>(dst)[i] = f32_to_bf16(v); break;
      case DType::F16: static_cast<uint16_t*>(dst)[i] = f32_to_f16(v); break;
      default: break;  // not reachable: targets are float dtypes or equal to the source
    }
  }
}

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

Status check_weights(const WeightTable& table, const io::Checkpoint& ckpt) {
  std::vector<std::string> missing, misshaped, unexpected;
  std::set<std::string> claimed;
  for (const WeightSpec& s : table.specs()) {
    claimed.insert(s.name);
    const io::Checkpoint::Entry* e = ckpt.find(s.name);
    if (!e) {
      missing.push_back(fmt::format("{} {}", s.name, s.shape.to_string()));
      continue;
    }
    if (!shape_ok(s, e->info->shape))
      misshaped.push_back(fmt::format("{}: shape {} (expected {})", s.name, e->info->shape.to_string(), s.shape.to_string()));
    else if (!dtype_ok(s.role, e->info->dtype))
      misshaped.push_back(fmt::format("{}: dtype {} (expected {})", s.name, dtype_name(e->info->dtype), role_dtypes(s.role)));
  }
  for (const std::string& n : ckpt.names())
    if (!claimed.count(n) && !table.ignored(n)) unexpected.push_back(n);
  if (missing.empty() && misshaped.empty() && unexpected.empty()) return {};
  std::string msg = fmt::format("{}: checkpoint does not match the model", ckpt.dir().string());
  auto list = [&](const char* what, const std::vector<std::string>& v) {
    if (v.empty()) return;
    msg += fmt::format("\n  {} {} tensor(s):", v.size(), what);
    for (size_t i = 0; i < v.size() && i < 50; ++i) msg += "\n    " + v[i];
    if (v.size() > 50) msg += fmt::format("\n    ... and {} more", v.size() - 50);
  };
  list("missing", missing);
  list("mis-shaped or wrongly typed", misshaped);
  list("unexpected", unexpected);
  return invalid_argument("{}", msg);
}

Result<LoadedWeights> load_weights(const WeightTable& table, std::shared_ptr<const io::Checkpoint> ckpt,
                                   backend::Backend& be, const LoadProgress& progress) {
  RILL_TRY(check_weights(table, *ckpt));
  const auto& specs = table.specs();
  const auto& stacks = table.stacks();

  // Stacks take the dtype of their parts (all parts of a stack must agree, else F32 for vectors).
  std::vector<DType> stack_dtype(stacks.size(), DType::F32);
  std::vector<bool> stack_seen(stacks.size(), false);
  for (const WeightSpec& s : specs) {
    if (s.stack < 0) continue;
    const DType t = target_dtype(s.role, ckpt->find(s.name)->info->dtype, be);
    if (stack_seen[s.stack] && stack_dtype[s.stack] != t)
      return invalid_argument("{}: {} is stored as {} but the tensors fused with it are {}", ckpt->dir().string(),
                              s.name, dtype_name(t), dtype_name(stack_dtype[s.stack]));
    stack_dtype[s.stack] = t;
    stack_seen[s.stack] = true;
  }

  // Plan: zero-copy where possible, otherwise an offset into one allocation.
  const bool cpu = be.device() == Device::Cpu;
  std::vector<int64_t> offset(specs.size(), -1), stack_offset(stacks.size(), -1);
  size_t total = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& s = specs[i];
    if (s.stack >= 0) continue;
    const DType stored = ckpt->find(s.name)->info->dtype;
    const DType t = target_dtype(s.role, stored, be);
    if (cpu && t == stored) continue;  // zero-copy view into the mmap
    offset[i] = int64_t(total);
    total += align_up(static_cast<size_t>(s.shape.numel()) * dtype_size(t));
  }
  for (size_t k = 0; k < stacks.size(); ++k) {
    stack_offset[k] = int64_t(total);
    total += align_up(static_cast<size_t>(stacks[k].shape.numel()) * dtype_size(stack_dtype[k]));
  }

  LoadedWeights out;
  out.checkpoint = ckpt;
  out.device_bytes = int64_t(total);
  char* base = nullptr;
  if (total) {
    RILL_ASSIGN_OR_RETURN(auto alloc, be.allocate(total));
    base = static_cast<char*>(alloc.data());
    out.storage.push_back(std::move(alloc));
  }
  for (size_t k = 0; k < stacks.size(); ++k)
    *stacks[k].dest = TensorView::make(base + stack_offset[k], stack_dtype[k], stacks[k].shape, be.device());

  // Copies go through the backend's bulk upload (several shards streaming at once on CUDA); tensors whose dtype
  // changes are converted on the host first and kept alive until the upload ends.
  std::vector<backend::CopyJob> jobs;
  std::vector<std::vector<char>> converted;
  std::map<const io::SafetensorsFile*, int> group_of;
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& s = specs[i];
    const io::Checkpoint::Entry* e = ckpt->find(s.name);
    const TensorView src = ckpt->view(*e);
    const DType t = s.stack >= 0 ? stack_dtype[s.stack] : target_dtype(s.role, src.dtype, be);
    char* dst = nullptr;
    if (s.stack >= 0) dst = base + stack_offset[s.stack] + s.stack_offset * int64_t(dtype_size(t));
    else if (offset[i] >= 0) dst = base + offset[i];
    if (!dst) {
      *s.dest = TensorView::make(src.data, src.dtype, s.shape, Device::Cpu);  // zero-copy
      continue;
    }
    const size_t bytes = size_t(s.shape.numel()) * dtype_size(t);
    const void* host = src.data;
    if (t != src.dtype) {
      converted.emplace_back(bytes);
      convert(src.data, src.dtype, converted.back().data(), t, s.shape.numel());
      host = converted.back().data();
    }
    const int group = group_of.emplace(e->file, int(group_of.size())).first->second;
    jobs.push_back({dst, host, bytes, group});
    if (s.dest) *s.dest = TensorView::make(dst, t, s.shape, be.device());
  }
  std::atomic<int64_t> done{0};
  int64_t upload_bytes = 0;
  for (const auto& j : jobs) upload_bytes += int64_t(j.bytes);
  std::mutex progress_mu;
  RILL_TRY(be.copy_to_device_batch(jobs, [&](size_t n) {
    const int64_t now = done += int64_t(n);
    if (!progress) return;
    std::lock_guard lock(progress_mu);
    progress(now, upload_bytes);
  }));
  return out;
}

Result<LoadedWeights> load_dummy_weights(const WeightTable& table, backend::Backend& be, uint64_t seed) {
  const auto& specs = table.specs();
  const auto& stacks = table.stacks();
  const DType mat = be.matrix_dtype().value_or(DType::BF16);
  auto dtype_of = [&](WeightRole r) { return r == WeightRole::Matrix ? mat : r == WeightRole::Vector ? DType::F32 : DType::U8; };
  size_t total = 0;
  std::vector<int64_t> offset(specs.size(), -1), stack_offset(stacks.size(), -1);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].stack >= 0) continue;
    offset[i] = int64_t(total);
    total += align_up(static_cast<size_t>(specs[i].shape.numel()) * dtype_size(dtype_of(specs[i].role)));
  }
  for (size_t k = 0; k < stacks.size(); ++k) {
    stack_offset[k] = int64_t(total);
    total += align_up(static_cast<size_t>(stacks[k].shape.numel()) * dtype_size(dtype_of(stacks[k].role)));
  }
  LoadedWeights out;
  out.device_bytes = int64_t(total);
  RILL_ASSIGN_OR_RETURN(auto alloc, be.allocate(total ? total : 1));
  char* base = static_cast<char*>(alloc.data());
  out.storage.push_back(std::move(alloc));
  for (size_t k = 0; k < stacks.size(); ++k)
    *stacks[k].dest = TensorView::make(base + stack_offset[k], dtype_of(stacks[k].role), stacks[k].shape, be.device());
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& s = specs[i];
    const DType t = dtype_of(s.role);
    char* dst = s.stack >= 0 ? base + stack_offset[s.stack] + s.stack_offset * int64_t(dtype_size(t)) : base + offset[i];
    const TensorView v = TensorView::make(dst, t, s.shape, be.device());
    // Matrices uniform with variance 1/in_features (activations stay O(1)); vectors near 1; packed bytes
    // small E2M1 codes or E8M0 scales near 2^-7.
    const float a = std::sqrt(3.0f / float(s.shape[s.shape.rank() - 1]));
    switch (s.role) {
      case WeightRole::Matrix: RILL_TRY(be.fill_random(v, seed + i, -a, a)); break;
      case WeightRole::Vector: RILL_TRY(be.fill_random(v, seed + i, 0.9f, 1.1f)); break;
      case WeightRole::Packed: RILL_TRY(be.fill_random(v, seed + i, 118.0f, 122.0f)); break;
    }
    if (s.dest) *s.dest = v;
  }
  return out;
}

}  // namespace rill::model
