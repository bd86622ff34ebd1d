#include "model/weights/weight_table.h"

namespace rill::model {

WeightSpec& WeightTable::matrix(std::string name, Shape shape, backend::LinearWeight* dst) {
  dst->format = backend::WeightFormat::Dense;
  specs_.push_back({std::move(name), shape, {}, WeightRole::Matrix, &dst->weight, -1, 0});
  const size_t i = specs_.size() - 1;
  specs_[i].fp8.linear = dst;
  declare_fp8(i);
  return specs_[i];
}

void WeightTable::declare_fp8(size_t i) {
  if (!fp8_plan_) return;
  const Fp8Plan& plan = *fp8_plan_;
  const std::string name = specs_[i].name;
  const Shape shape = specs_[i].shape;
  Fp8Load f = specs_[i].fp8;
  f.stored = plan.stored(name);
  f.stored_block = plan.stored_blocks();
  const bool target = plan.target(name);
  const int st = specs_[i].stack;
  if (st < 0) {
    f.target = target;
    f.target_block = f.stored ? f.stored_block : plan.quant_blocks(0);
  } else {
    WeightStack& k = stacks_[size_t(st)];
    // A stored stack stays FP8 only if the checkpoint's blocks never span two parts; otherwise (and if any part
    // is not a target) the stack is loaded dense, its stored parts dequantized.
    const bool fits = !f.stored || k.row_unit % f.stored_block.rows == 0;
    k.fp8_target = (k.fp8_seen ? k.fp8_target : true) && target && fits && k.format != nullptr;
    if (!k.fp8_seen) k.fp8_block = f.stored ? f.stored_block : plan.quant_blocks(k.row_unit);
    k.fp8_seen = true;
  }
  if (f.stored) {
    specs_.push_back({plan.scale_name(name),
                      {f.stored_block.scale_rows(shape[0]), f.stored_block.scale_cols(shape[1])},
                      {},
                      WeightRole::Fp8Scale,
                      nullptr,
                      -1,
                      0});
    f.scale_spec = int(specs_.size()) - 1;
  }
  specs_[i].fp8 = f;
}

int WeightTable::matrix_stack(Shape shape, backend::LinearWeight* dst, int64_t row_unit) {
  dst->format = backend::WeightFormat::Dense;
  return matrix_stack(shape, &dst->weight, &dst->scales, &dst->format, &dst->block, row_unit);
}

int WeightTable::matrix_stack(Shape shape, TensorView* dst, TensorView* scales, backend::WeightFormat* format,
                              backend::Fp8Blocks* block, int64_t row_unit) {
  *format = backend::WeightFormat::Dense;
  WeightStack k{shape, WeightRole::Matrix, dst};
  k.scales = scales;
  k.format = format;
  k.block = block;
  k.row_unit = row_unit;
  stacks_.push_back(k);
  return int(stacks_.size()) - 1;
}

WeightSpec& WeightTable::vector(std::string name, Shape shape, TensorView* dst,
                                std::vector<Shape> alt_shapes) {
  specs_.push_back({std::move(name), shape, std::move(alt_shapes), WeightRole::Vector, dst, -1, 0});
  return specs_.back();
}

WeightSpec& WeightTable::packed(std::string name, Shape shape, TensorView* dst) {
  specs_.push_back({std::move(name), shape, {}, WeightRole::Packed, dst, -1, 0});
  return specs_.back();
}

std::vector<std::string> WeightTable::candidate_names(const WeightSpec& s) const {
  std::vector<std::string> out = {s.name};
  out.insert(out.end(), s.alt_names.begin(), s.alt_names.end());
  const size_t n = out.size();
  for (size_t i = 0; i < n; ++i)
    for (const auto& [canonical, alt] : prefix_aliases_)
      if (out[i].compare(0, canonical.size(), canonical) == 0)
        out.push_back(alt + out[i].substr(canonical.size()));
  return out;
}

int WeightTable::stack(Shape shape, WeightRole role, TensorView* dst) {
  stacks_.push_back({shape, role, dst});
  return int(stacks_.size()) - 1;
}

WeightSpec& WeightTable::stack_part(int stack, std::string name, Shape part_shape, int64_t elem_offset,
                                    std::vector<Shape> alt_shapes) {
  specs_.push_back({std::move(name), part_shape, std::move(alt_shapes), stacks_[stack].role, nullptr, stack,
                    elem_offset});
  const size_t i = specs_.size() - 1;
  if (stacks_[stack].role == WeightRole::Matrix) declare_fp8(i);
  return specs_[i];
}

bool WeightTable::ignored(const std::string& name) const {
  for (const auto& p : ignored_)
    if (name.compare(0, p.size(), p) == 0) return true;
  if (elsewhere_.empty()) return false;
  if (elsewhere_.count(name)) return true;
  for (const auto& [canonical, alt] : prefix_aliases_)
    if (name.compare(0, alt.size(), alt) == 0 && elsewhere_.count(canonical + name.substr(alt.size())))
      return true;
  return false;
}

Shape WeightSpec::stored_shape() const {
  Shape s = shape;
  if (slice.dim >= 0) s[slice.dim] = slice.extent;
  return s;
}

WeightSpec& WeightSpec::split(int dim, int rank, int parts) {
  if (parts <= 1) return *this;
  const int64_t part = shape[dim] / parts;
  slice = {dim, int64_t(rank) * part, shape[dim]};
  shape[dim] = part;
  return *this;
}

namespace {
bool is_scale(const WeightSpec& s) {
  return s.name.size() >= 13 && s.name.compare(s.name.size() - 13, 13, ".weight_scale") == 0;
}
}  // namespace

int64_t WeightTable::n_params() const {
  int64_t n = 0;
  for (const auto& s : specs_) {
    if (s.role == WeightRole::Fp8Scale) continue;  // scales are not parameters
    if (s.role != WeightRole::Packed)
      n += s.shape.numel();
    else if (!is_scale(s))
      n += 2 * s.shape.numel();  // two FP4 values per byte; scales are not parameters
  }
  return n;
}

int64_t WeightTable::stored_bytes() const {
  int64_t n = 0;
  for (const auto& s : specs_) {
    const int64_t bytes = s.role == WeightRole::Packed ? 1 : s.role == WeightRole::Fp8Scale ? 4 : s.fp8.stored ? 1 : 2;
    n += s.shape.numel() * bytes;
  }
  return n;
}

int64_t WeightTable::loaded_bytes_of(const WeightSpec& s, int matrix_bytes) const {
  switch (s.role) {
    case WeightRole::Packed: return s.shape.numel();
    case WeightRole::Vector: return 4 * s.shape.numel();
    case WeightRole::Fp8Scale: return 0;  // counted with the matrix it scales
    case WeightRole::Matrix: {
      const bool fp8 = s.stack >= 0 ? stacks_[size_t(s.stack)].fp8_target : s.fp8.target;
      if (!fp8) return matrix_bytes * s.shape.numel();
      const backend::Fp8Blocks b = s.stack >= 0 ? stacks_[size_t(s.stack)].fp8_block : s.fp8.target_block;
      return s.shape.numel() + 4 * b.scale_rows(s.shape[0]) * b.scale_cols(s.shape[1]);
    }
  }
  return 0;
}

int64_t WeightTable::loaded_bytes(int matrix_bytes) const {
  int64_t n = 0;
  for (const auto& s : specs_) n += loaded_bytes_of(s, matrix_bytes);
  return n;
}

}  // namespace rill::model
