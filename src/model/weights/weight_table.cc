#include "model/weights/weight_table.h"

namespace rill::model {

WeightSpec& WeightTable::matrix(std::string name, Shape shape, backend::LinearWeight* dst) {
  dst->format = backend::WeightFormat::Dense;
  specs_.push_back({std::move(name), shape, {}, WeightRole::Matrix, &dst->weight, -1, 0});
  return specs_.back();
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
  return specs_.back();
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
    if (s.role != WeightRole::Packed)
      n += s.shape.numel();
    else if (!is_scale(s))
      n += 2 * s.shape.numel();  // two FP4 values per byte; scales are not parameters
  }
  return n;
}

int64_t WeightTable::stored_bytes() const {
  int64_t n = 0;
  for (const auto& s : specs_) n += s.shape.numel() * (s.role == WeightRole::Packed ? 1 : 2);
  return n;
}

}  // namespace rill::model
