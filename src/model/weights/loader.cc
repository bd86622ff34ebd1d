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
  const Shape want = s.stored_shape();
  if (stored == want) return true;
  if (s.zero_padded && want.rank() == 1 && stored.rank() == 1 && stored[0] > want[0]) return true;
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

// The stored entry of a spec under any of its spellings (nullptr if none), and the name it was found under.
const io::Checkpoint::Entry* find_entry(const WeightTable& t, const WeightSpec& s, const io::Checkpoint& c,
                                        std::string* found) {
  if (const io::Checkpoint::Entry* e = c.find(s.name)) {  // the common case, without building the name list
    if (found) *found = s.name;
    return e;
  }
  for (const std::string& n : t.candidate_names(s))
    if (const io::Checkpoint::Entry* e = c.find(n)) {
      if (found) *found = n;
      return e;
    }
  return nullptr;
}

// A zero-padded tensor's tail must be exactly zero: anything else means the file is not what we think it is.
std::string padded_tail_problem(const WeightSpec& s, const std::string& stored_name, const TensorView& v) {
  const int64_t used = s.stored_shape().numel();
  for (int64_t i = used; i < v.numel(); ++i) {
    const float x = load_as_f32(v.data, v.dtype, size_t(i));
    if (x != 0.0f)
      return fmt::format(
          "{}: stored {} is zero-padded past its {} used values, but element {} is {} (a non-zero "
          "tail means a wrong or mis-converted file)",
          stored_name, v.shape.to_string(), used, i, x);
  }
  return {};
}

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Why an unexpected tensor is there, where we can tell (quantized payloads where the model wants dense).
std::string describe_unexpected(const std::string& name, const std::set<std::string>& declared) {
  for (std::string_view suffix : {".weight_packed", ".weight_scale"}) {
    if (!ends_with(name, suffix)) continue;
    const std::string dense = name.substr(0, name.size() - suffix.size()) + ".weight";
    if (declared.count(dense))
      return fmt::format(
          "{} (quantized, but {} is a dense weight here: MXFP4 packs only the routed experts' "
          "w1/w2/w3, and only with an mxfp4-pack-quantized quantization_config)",
          name, dense);
    return fmt::format(
        "{} (a quantized tensor this model does not declare: MXFP4 packs only the routed experts, "
        "and only with an mxfp4-pack-quantized quantization_config)",
        name);
  }
  return name;
}

// Where a spec's elements lie in the stored tensor, in elements of the stored dtype: `outer` runs of `run`
// elements, run o starting at o * pitch + offset (one run when the whole tensor or a leading-dimension slice
// is loaded). Any stored shape of the same elements (alt_shapes, a zero-padded tail) has the same layout.
struct SourceRuns {
  int64_t outer = 1, pitch = 0, offset = 0, run = 0;
};

SourceRuns source_runs(const WeightSpec& s) {
  if (s.slice.dim < 0) return {1, 0, 0, s.shape.numel()};
  const Shape stored = s.stored_shape();
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < s.slice.dim; ++i) outer *= stored[i];
  for (int i = s.slice.dim + 1; i < stored.rank(); ++i) inner *= stored[i];
  return {outer, stored[s.slice.dim] * inner, s.slice.begin * inner, s.shape[s.slice.dim] * inner};
}

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

Status check_weights(const WeightTable& table, const io::Checkpoint& ckpt) {
  std::vector<std::string> missing, misshaped, unexpected;
  std::set<std::string> claimed, declared;
  for (const WeightSpec& s : table.specs()) {
    declared.insert(s.name);
    std::string name;
    const io::Checkpoint::Entry* e = find_entry(table, s, ckpt, &name);
    if (!e) {
      missing.push_back(fmt::format("{} {}", s.name, s.stored_shape().to_string()));
      continue;
    }
    claimed.insert(name);
    if (!shape_ok(s, e->info->shape))
      misshaped.push_back(fmt::format("{}: shape {} (expected {})", name, e->info->shape.to_string(),
                                      s.stored_shape().to_string()));
    else if (!dtype_ok(s.role, e->info->dtype))
      misshaped.push_back(
          fmt::format("{}: dtype {} (expected {})", name, dtype_name(e->info->dtype), role_dtypes(s.role)));
    else if (s.zero_padded && e->info->shape.numel() > s.shape.numel())
      if (std::string why = padded_tail_problem(s, name, ckpt.view(*e)); !why.empty())
        misshaped.push_back(why);
  }
  for (const std::string& n : ckpt.names())
    if (!claimed.count(n) && !table.ignored(n)) unexpected.push_back(describe_unexpected(n, declared));
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
  std::vector<const io::Checkpoint::Entry*> entry(specs.size());  // every one present: checked above
  for (size_t i = 0; i < specs.size(); ++i) entry[i] = find_entry(table, specs[i], *ckpt, nullptr);

  // Stacks take the dtype of their parts (all parts of a stack must agree, else F32 for vectors).
  std::vector<DType> stack_dtype(stacks.size(), DType::F32);
  std::vector<bool> stack_seen(stacks.size(), false);
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& s = specs[i];
    if (s.stack < 0) continue;
    const DType t = target_dtype(s.role, entry[i]->info->dtype, be);
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
    const DType stored = entry[i]->info->dtype;
    const DType t = target_dtype(s.role, stored, be);
    if (cpu && t == stored && source_runs(s).outer == 1) continue;  // zero-copy view into the mmap
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
    RILL_TRY(be.check_available(total, "the model's weights"));
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
    const io::Checkpoint::Entry* e = entry[i];
    const TensorView src = ckpt->view(*e);
    const DType t = s.stack >= 0 ? stack_dtype[s.stack] : target_dtype(s.role, src.dtype, be);
    const SourceRuns runs = source_runs(s);
    const size_t src_es = dtype_size(src.dtype);
    const char* first = static_cast<const char*>(src.data) + runs.offset * int64_t(src_es);
    char* dst = nullptr;
    if (s.stack >= 0) dst = base + stack_offset[s.stack] + s.stack_offset * int64_t(dtype_size(t));
    else if (offset[i] >= 0) dst = base + offset[i];
    if (!dst) {
      *s.dest = TensorView::make(const_cast<char*>(first), src.dtype, s.shape, Device::Cpu);  // zero-copy
      continue;
    }
    const size_t bytes = size_t(s.shape.numel()) * dtype_size(t);
    const void* host = first;
    if (t != src.dtype || runs.outer > 1) {  // converted, or this rank's columns gathered, on the host
      converted.emplace_back(bytes);
      char* out = converted.back().data();
      for (int64_t o = 0; o < runs.outer; ++o)
        convert(first + o * runs.pitch * int64_t(src_es), src.dtype, out + o * runs.run * int64_t(dtype_size(t)), t,
                runs.run);
      host = out;
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

int dummy_mxfp4_scale(int64_t fan_in) {
  // E2M1 codes uniform over all 16 have rms ~2.95, so 2^(e - 127) ~ 1 / (2.95 sqrt(fan_in)). A scale of 1
  // (e = 127) would make each expert matrix ~170x too large at K3's widths.
  return 127 + int(std::lround(std::log2(1.0 / (2.95 * std::sqrt(double(std::max<int64_t>(fan_in, 1)))))));
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
  RILL_TRY(be.check_available(total, "the model's weights (--load-format dummy)"));
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
    // Matrices uniform with variance 1/in_features (activations stay O(1)); vectors near 1.
    const float a = std::sqrt(3.0f / float(s.shape[s.shape.rank() - 1]));
    switch (s.role) {
      case WeightRole::Matrix: RILL_TRY(be.fill_random(v, seed + i, -a, a)); break;
      case WeightRole::Vector: RILL_TRY(be.fill_random(v, seed + i, 0.9f, 1.1f)); break;
      case WeightRole::Packed:  // MXFP4: FP4 code bytes uniform over all code pairs, E8M0 scales by fan-in
        if (ends_with(s.name, ".weight_scale")) {
          const int e = dummy_mxfp4_scale(32 * s.shape[s.shape.rank() - 1]);  // 32 columns per scale
          RILL_TRY(be.fill_random(v, seed + i, float(e - 1), float(e)));
        } else {
          RILL_TRY(be.fill_random(v, seed + i, 0.0f, 255.0f));
        }
        break;
    }
    if (s.dest) *s.dest = v;
  }
  return out;
}

}  // namespace rill::model
