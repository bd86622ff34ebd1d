#include "model/weights/loader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <atomic>
#include <map>
#include <mutex>
#include <set>

#include "model/weights/fp8_codec.h"


namespace rill::model {
namespace {

bool dtype_ok(const WeightSpec& s, DType t) {
  switch (s.role) {
    case WeightRole::Matrix:
      if (s.fp8.stored) return t == DType::F8E4M3;
      return t == DType::BF16 || t == DType::F16 || t == DType::F32;
    case WeightRole::Vector:
    case WeightRole::Fp8Scale: return t == DType::BF16 || t == DType::F16 || t == DType::F32;
    case WeightRole::Packed: return t == DType::U8;
  }
  return false;
}

const char* role_dtypes(const WeightSpec& s) {
  switch (s.role) {
    case WeightRole::Matrix: return s.fp8.stored ? "F8_E4M3 (the quantization_config says FP8)" : "BF16, F16 or F32";
    case WeightRole::Vector:
    case WeightRole::Fp8Scale: return "BF16, F16 or F32";
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

// Whether a matrix spec is loaded as FP8 (a stack's parts follow their stack).
bool fp8_target(const WeightTable& t, const WeightSpec& s) {
  if (s.role != WeightRole::Matrix) return false;
  return s.stack >= 0 ? t.stacks()[size_t(s.stack)].fp8_target : s.fp8.target;
}
backend::Fp8Blocks fp8_block(const WeightTable& t, const WeightSpec& s) {
  return s.stack >= 0 ? t.stacks()[size_t(s.stack)].fp8_block : s.fp8.target_block;
}

// The dtype a tensor takes on `backend`, given the dtype it is stored in. FP8 targets keep their codes; a stored
// FP8 matrix kept dense becomes the backend's matrix dtype (F32 on the CPU, where the dequantized values are exact).
DType target_dtype(const WeightTable& t, const WeightSpec& s, DType stored, const backend::Backend& be) {
  switch (s.role) {
    case WeightRole::Matrix:
      if (fp8_target(t, s)) return DType::F8E4M3;
      if (s.fp8.stored) return be.matrix_dtype().value_or(DType::F32);
      return be.matrix_dtype().value_or(stored);
    case WeightRole::Vector:
    case WeightRole::Fp8Scale: return DType::F32;
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
    else if (!dtype_ok(s, e->info->dtype))
      misshaped.push_back(
          fmt::format("{}: dtype {} (expected {})", name, dtype_name(e->info->dtype), role_dtypes(s)));
    else if (s.fp8.stored && s.slice.dim >= 0)
      misshaped.push_back(fmt::format("{}: FP8 weights cannot be split across ranks yet (tensor or expert-tensor "
                                      "parallelism); run FP8 with --tp-size 1",
                                      name));
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
    const DType t = target_dtype(table, s, entry[i]->info->dtype, be);
    if (stack_seen[s.stack] && stack_dtype[s.stack] != t)
      return invalid_argument("{}: {} is stored as {} but the tensors fused with it are {}", ckpt->dir().string(),
                              s.name, dtype_name(t), dtype_name(stack_dtype[s.stack]));
    stack_dtype[s.stack] = t;
    stack_seen[s.stack] = true;
  }

  // Plan: zero-copy where possible, otherwise an offset into one allocation. FP8 targets also get their F32
  // scales (a stack's in one block of [rows / block.rows, scale columns] per stack).
  const bool cpu = be.device() == Device::Cpu;
  std::vector<int64_t> offset(specs.size(), -1), stack_offset(stacks.size(), -1);
  std::vector<int64_t> scale_offset(specs.size(), -1), stack_scale_offset(stacks.size(), -1);
  size_t total = 0;
  auto scale_bytes = [](backend::Fp8Blocks b, int64_t rows, int64_t cols) {
    return align_up(size_t(b.scale_rows(rows) * b.scale_cols(cols)) * 4);
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& s = specs[i];
    if (s.stack >= 0 || s.role == WeightRole::Fp8Scale) continue;  // scales are loaded with their matrix
    const DType stored = entry[i]->info->dtype;
    const DType t = target_dtype(table, s, stored, be);
    if (fp8_target(table, s)) {
      scale_offset[i] = int64_t(total);
      total += scale_bytes(fp8_block(table, s), s.shape[0], s.shape[1]);
    }
    if (cpu && t == stored && source_runs(s).outer == 1) continue;  // zero-copy view into the mmap
    offset[i] = int64_t(total);
    total += align_up(static_cast<size_t>(s.shape.numel()) * dtype_size(t));
  }
  for (size_t k = 0; k < stacks.size(); ++k) {
    stack_offset[k] = int64_t(total);
    total += align_up(static_cast<size_t>(stacks[k].shape.numel()) * dtype_size(stack_dtype[k]));
    if (stacks[k].fp8_target) {
      const int64_t cols = stacks[k].shape[stacks[k].shape.rank() - 1];
      stack_scale_offset[k] = int64_t(total);
      total += scale_bytes(stacks[k].fp8_block, stacks[k].shape.numel() / cols, cols);
    }
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
  for (size_t k = 0; k < stacks.size(); ++k) {
    const WeightStack& st = stacks[k];
    *st.dest = TensorView::make(base + stack_offset[k], stack_dtype[k], st.shape, be.device());
    if (!st.fp8_target) continue;
    Shape ss = st.shape;  // [..., rows, cols] -> [..., rows / block.rows, scale columns]
    const int r = ss.rank();
    ss[r - 2] = st.fp8_block.scale_rows(ss[r - 2]);
    ss[r - 1] = st.fp8_block.scale_cols(ss[r - 1]);
    *st.scales = TensorView::make(base + stack_scale_offset[k], DType::F32, ss, be.device());
    *st.format = backend::WeightFormat::Fp8;
    *st.block = st.fp8_block;
  }

  // Copies go through the backend's bulk upload (several shards streaming at once on CUDA); tensors whose dtype
  // changes are converted on the host first and kept alive until their upload ends. Uploads are flushed every
  // kFlushBytes of converted data, so quantizing a whole checkpoint never holds a second copy of it on the host.
  constexpr size_t kFlushBytes = size_t(1) << 30;
  std::vector<backend::CopyJob> jobs;
  std::vector<std::vector<char>> converted;
  size_t converted_bytes = 0;
  std::map<const io::SafetensorsFile*, int> group_of;
  std::atomic<int64_t> done{0};
  std::mutex progress_mu;
  // The bytes the uploads below move, for the progress report: the plan's, except that a matrix quantized at
  // load travels as its source matrix to a GPU (quantized there) and not at all to the CPU (quantized in place).
  int64_t upload_total = int64_t(total);
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& s = specs[i];
    if (s.role == WeightRole::Fp8Scale || !fp8_target(table, s) || s.fp8.stored) continue;
    const int64_t n = s.shape.numel();
    upload_total -= n + int64_t(scale_bytes(fp8_block(table, s), s.shape[0], s.shape[1]));
    if (!cpu) upload_total += n * int64_t(dtype_size(entry[i]->info->dtype));
  }
  upload_total = std::max<int64_t>(upload_total, 1);
  auto flush = [&]() -> Status {
    RILL_TRY(be.copy_to_device_batch(jobs, [&](size_t n) {
      const int64_t now = done += int64_t(n);
      if (!progress) return;
      std::lock_guard lock(progress_mu);
      progress(std::min(now, upload_total), upload_total);
    }));
    jobs.clear();
    converted.clear();
    converted_bytes = 0;
    return {};
  };
  auto host_buffer = [&](size_t bytes) {
    converted.emplace_back(bytes);
    converted_bytes += bytes;
    return converted.back().data();
  };
  // `--quantization fp8` (matrices not stored in FP8): the backend that holds the weight quantizes it
  // (Backend::quantize_fp8). The CPU reads the mapped checkpoint; a GPU gets each source matrix uploaded into a
  // staging buffer with the other uploads (kStagingBytes at a time, so the bf16 weights never sit in device
  // memory twice) and quantizes the staged matrices once they have landed. The host only copies bytes.
  constexpr size_t kStagingBytes = size_t(256) << 20;
  backend::DeviceAllocation staging;
  size_t staging_used = 0;
  std::vector<backend::QuantizeFp8Args> staged;
  auto quantize_staged = [&]() -> Status {
    if (staged.empty()) return {};
    RILL_TRY(flush());  // the staged sources have landed
    for (const backend::QuantizeFp8Args& q : staged) RILL_TRY(be.quantize_fp8(q));
    RILL_TRY(be.synchronize());  // before the next matrices are uploaded over them
    staged.clear();
    staging_used = 0;
    return {};
  };
  auto quantize = [&](const TensorView& src, const TensorView& codes, const TensorView& scales, backend::Fp8Blocks b,
                      int group) -> Status {
    if (be.device() == Device::Cpu) return be.quantize_fp8({src, codes, scales, b});
    const size_t bytes = (size_t(src.numel()) * dtype_size(src.dtype) + 255) / 256 * 256;
    if (staging_used + bytes > staging.size()) RILL_TRY(quantize_staged());
    if (bytes > staging.size()) {
      staging = {};
      RILL_ASSIGN_OR_RETURN(staging, be.allocate(std::max(kStagingBytes, bytes)));
    }
    char* at = static_cast<char*>(staging.data()) + staging_used;
    staging_used += bytes;
    jobs.push_back({at, src.data, size_t(src.numel()) * dtype_size(src.dtype), group});
    staged.push_back({TensorView::make(at, src.dtype, src.shape, be.device()), codes, scales, b});
    return {};
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& s = specs[i];
    if (s.role == WeightRole::Fp8Scale) continue;
    const io::Checkpoint::Entry* e = entry[i];
    const TensorView src = ckpt->view(*e);
    const DType t = s.stack >= 0 ? stack_dtype[s.stack] : target_dtype(table, s, src.dtype, be);
    const SourceRuns runs = source_runs(s);
    const size_t src_es = dtype_size(src.dtype);
    const char* first = static_cast<const char*>(src.data) + runs.offset * int64_t(src_es);
    const int group = group_of.emplace(e->file, int(group_of.size())).first->second;
    char* dst = nullptr;
    if (s.stack >= 0) dst = base + stack_offset[s.stack] + s.stack_offset * int64_t(dtype_size(t));
    else if (offset[i] >= 0) dst = base + offset[i];
    const bool to_fp8 = fp8_target(table, s);
    if (to_fp8 || s.fp8.stored) {
      if (runs.outer > 1 || s.slice.dim >= 0)
        return invalid_argument("{}: FP8 weights cannot be split across ranks yet; run FP8 with --tp-size 1", s.name);
      const int64_t rows = s.shape[0], cols = s.shape[1];
      const int64_t n = rows * cols;
      // The stored scales as F32 (any float dtype in the file), when the checkpoint has them.
      std::vector<float> stored_scales;
      if (s.fp8.stored) {
        const TensorView sv = ckpt->view(*entry[size_t(s.fp8.scale_spec)]);
        stored_scales.resize(size_t(sv.numel()));
        convert(sv.data, sv.dtype, stored_scales.data(), DType::F32, sv.numel());
      }
      if (to_fp8) {
        const backend::Fp8Blocks b = fp8_block(table, s);
        const size_t sbytes = size_t(b.scale_rows(rows) * b.scale_cols(cols)) * 4;
        char* sdst = s.stack >= 0 ? base + stack_scale_offset[s.stack] +
                                        (s.stack_offset / cols / b.rows) * b.scale_cols(cols) * 4
                                  : base + scale_offset[i];
        const TensorView scale_view =
            TensorView::make(sdst, DType::F32, {b.scale_rows(rows), b.scale_cols(cols)}, be.device());
        if (s.fp8.stored) {
          float* scales = reinterpret_cast<float*>(host_buffer(sbytes));
          std::copy(stored_scales.begin(), stored_scales.end(), scales);  // same blocks: checked at declaration
          jobs.push_back({sdst, scales, sbytes, group});
          if (!dst) {  // stored codes used in place (CPU)
            dst = const_cast<char*>(first);
          } else {
            jobs.push_back({dst, first, size_t(n), group});
          }
        } else {
          if (!dst) return internal_error("{}: no memory planned for its FP8 codes", s.name);
          RILL_TRY(quantize(TensorView::make(const_cast<char*>(first), src.dtype, {rows, cols}, Device::Cpu),
                            TensorView::make(dst, DType::F8E4M3, {rows, cols}, be.device()), scale_view, b, group));
        }
        if (s.stack < 0) {
          *s.dest = TensorView::make(dst, DType::F8E4M3, s.shape, dst == first ? Device::Cpu : be.device());
          s.fp8.linear->format = backend::WeightFormat::Fp8;
          s.fp8.linear->block = b;
          s.fp8.linear->scales = scale_view;
        }
      } else {  // a stored FP8 matrix the model keeps dense: dequantized exactly into the matrix dtype
        const size_t bytes = size_t(n) * dtype_size(t);
        char* host = host_buffer(bytes);
        dequantize_fp8(reinterpret_cast<const uint8_t*>(first), rows, cols, stored_scales.data(), s.fp8.stored_block,
                       host, t);
        jobs.push_back({dst, host, bytes, group});
        if (s.dest) *s.dest = TensorView::make(dst, t, s.shape, be.device());
      }
      if (converted_bytes >= kFlushBytes) RILL_TRY(flush());
      continue;
    }
    if (!dst) {
      *s.dest = TensorView::make(const_cast<char*>(first), src.dtype, s.shape, Device::Cpu);  // zero-copy
      continue;
    }
    const size_t bytes = size_t(s.shape.numel()) * dtype_size(t);
    const void* host = first;
    if (t != src.dtype || runs.outer > 1) {  // converted, or this rank's columns gathered, on the host
      char* out = host_buffer(bytes);
      for (int64_t o = 0; o < runs.outer; ++o)
        convert(first + o * runs.pitch * int64_t(src_es), src.dtype, out + o * runs.run * int64_t(dtype_size(t)), t,
                runs.run);
      host = out;
    }
    jobs.push_back({dst, host, bytes, group});
    if (s.dest) *s.dest = TensorView::make(dst, t, s.shape, be.device());
    if (converted_bytes >= kFlushBytes) RILL_TRY(flush());
  }
  RILL_TRY(quantize_staged());
  RILL_TRY(flush());
  return out;
}

int dummy_mxfp4_scale(int64_t fan_in) {
  // E2M1 codes uniform over all 16 have rms ~2.95, so 2^(e - 127) ~ 1 / (2.95 sqrt(fan_in)). A scale of 1
  // (e = 127) would make each expert matrix ~170x too large at K3's widths.
  return 127 + int(std::lround(std::log2(1.0 / (2.95 * std::sqrt(double(std::max<int64_t>(fan_in, 1)))))));
}

// Dummy FP8 weights: codes uniform over the non-negative finite codes 0..126 (no NaN byte), the sign and size
// in the block scales, uniform in [-c, c] so that the weights' variance is 1 / fan_in like the dense dummies.
float dummy_fp8_scale(int64_t fan_in) {
  double sq = 0;
  for (int c = 0; c <= 126; ++c) sq += double(f8e4m3_to_f32(uint8_t(c))) * f8e4m3_to_f32(uint8_t(c));
  const double code_rms = std::sqrt(sq / 127);
  return float(std::sqrt(3.0 / double(std::max<int64_t>(fan_in, 1))) / code_rms);
}

Result<LoadedWeights> load_dummy_weights(const WeightTable& table, backend::Backend& be, uint64_t seed) {
  const auto& specs = table.specs();
  const auto& stacks = table.stacks();
  const DType mat = be.matrix_dtype().value_or(DType::BF16);
  auto dtype_of = [&](WeightRole r) { return r == WeightRole::Matrix ? mat : r == WeightRole::Vector ? DType::F32 : DType::U8; };
  size_t total = 0;
  std::vector<int64_t> offset(specs.size(), -1), stack_offset(stacks.size(), -1);
  std::vector<int64_t> scale_offset(specs.size(), -1), stack_scale_offset(stacks.size(), -1);
  auto scale_shape = [](backend::Fp8Blocks b, Shape sh) {
    const int r = sh.rank();
    sh[r - 2] = b.scale_rows(sh[r - 2]);
    sh[r - 1] = b.scale_cols(sh[r - 1]);
    return sh;
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& s = specs[i];
    if (s.stack >= 0 || s.role == WeightRole::Fp8Scale) continue;
    offset[i] = int64_t(total);
    const bool fp8 = fp8_target(table, s);
    total += align_up(static_cast<size_t>(s.shape.numel()) * (fp8 ? 1 : dtype_size(dtype_of(s.role))));
    if (fp8) {
      scale_offset[i] = int64_t(total);
      total += align_up(size_t(scale_shape(s.fp8.target_block, s.shape).numel()) * 4);
    }
  }
  for (size_t k = 0; k < stacks.size(); ++k) {
    stack_offset[k] = int64_t(total);
    const bool fp8 = stacks[k].fp8_target;
    total += align_up(static_cast<size_t>(stacks[k].shape.numel()) * (fp8 ? 1 : dtype_size(dtype_of(stacks[k].role))));
    if (fp8) {
      stack_scale_offset[k] = int64_t(total);
      total += align_up(size_t(scale_shape(stacks[k].fp8_block, stacks[k].shape).numel()) * 4);
    }
  }
  LoadedWeights out;
  out.device_bytes = int64_t(total);
  RILL_TRY(be.check_available(total, "the model's weights (--load-format dummy)"));
  RILL_ASSIGN_OR_RETURN(auto alloc, be.allocate(total ? total : 1));
  char* base = static_cast<char*>(alloc.data());
  out.storage.push_back(std::move(alloc));
  // FP8 codes (filled through a U8 view: fill_random knows integers) and scales.
  auto fill_fp8 = [&](char* codes, char* scales, const Shape& shape, backend::Fp8Blocks b, uint64_t s)
      -> Result<std::pair<TensorView, TensorView>> {
    RILL_TRY(be.fill_random(TensorView::make(codes, DType::U8, shape, be.device()), s, 0.0f, 126.0f));
    const TensorView sv = TensorView::make(scales, DType::F32, scale_shape(b, shape), be.device());
    const float c = dummy_fp8_scale(shape[shape.rank() - 1]);
    RILL_TRY(be.fill_random(sv, s + 0x9e3779b9ull, -c, c));
    return std::pair{TensorView::make(codes, DType::F8E4M3, shape, be.device()), sv};
  };
  for (size_t k = 0; k < stacks.size(); ++k) {
    const WeightStack& st = stacks[k];
    if (!st.fp8_target) {
      *st.dest = TensorView::make(base + stack_offset[k], dtype_of(st.role), st.shape, be.device());
      continue;
    }
    RILL_ASSIGN_OR_RETURN(auto v, fill_fp8(base + stack_offset[k], base + stack_scale_offset[k], st.shape,
                                           st.fp8_block, seed + specs.size() + k));
    *st.dest = v.first;
    *st.scales = v.second;
    *st.format = backend::WeightFormat::Fp8;
    *st.block = st.fp8_block;
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& s = specs[i];
    if (s.role == WeightRole::Fp8Scale || (s.stack >= 0 && stacks[size_t(s.stack)].fp8_target)) continue;
    if (fp8_target(table, s)) {
      RILL_ASSIGN_OR_RETURN(auto v, fill_fp8(base + offset[i], base + scale_offset[i], s.shape, s.fp8.target_block,
                                             seed + i));
      *s.dest = v.first;
      s.fp8.linear->format = backend::WeightFormat::Fp8;
      s.fp8.linear->block = s.fp8.target_block;
      s.fp8.linear->scales = v.second;
      continue;
    }
    const DType t = dtype_of(s.role);
    char* dst = s.stack >= 0 ? base + stack_offset[s.stack] + s.stack_offset * int64_t(dtype_size(t)) : base + offset[i];
    const TensorView v = TensorView::make(dst, t, s.shape, be.device());
    // Matrices uniform with variance 1/in_features (activations stay O(1)); vectors near 1.
    const float a = std::sqrt(3.0f / float(s.shape[s.shape.rank() - 1]));
    switch (s.role) {
      case WeightRole::Matrix: RILL_TRY(be.fill_random(v, seed + i, -a, a)); break;
      case WeightRole::Vector: RILL_TRY(be.fill_random(v, seed + i, 0.9f, 1.1f)); break;
      case WeightRole::Fp8Scale: break;  // skipped above
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
