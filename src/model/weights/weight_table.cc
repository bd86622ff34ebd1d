#include "model/weights/weight_table.h"

namespace rill::model {

void WeightTable::matrix(std::string name, Shape shape, backend::LinearWeight* dst) {
  dst->format = backend::WeightFormat::Dense;
  specs_.push_back({std::move(name), shape, {}, WeightRole::Matrix, &dst->weight, -1, 0});
}

void WeightTable::vector(std::string name, Shape shape, TensorView* dst, std::vector<Shape> alt_shapes) {
  specs_.push_back({std::move(name), shape, std::move(alt_shapes), WeightRole::Vector, dst, -1, 0});
}

void WeightTable::packed(std::string name, Shape shape, TensorView* dst) {
  specs_.push_back({std::move(name), shape, {}, WeightRole::Packed, dst, -1, 0});
}

int WeightTable::stack(Shape shape, WeightRole role, TensorView* dst) {
  stacks_.push_back({shape, role, dst});
  return int(stacks_.size()) - 1;
}

void WeightTable::stack_part(int stack, std::string name, Shape part_shape, int64_t elem_offset,
                             std::vector<Shape> alt_shapes) {
  specs_.push_back({std::move(name), part_shape, std::move(alt_shapes), stacks_[stack].role, nullptr, stack,
                    elem_offset});
}

bool WeightTable::ignored(const std::string& name) const {
  for (const auto& p : ignored_)
    if (name.compare(0, p.size(), p) == 0) return true;
  return false;
}

int64_t WeightTable::n_params() const {
  int64_t n = 0;
  for (const auto& s : specs_) n += s.shape.numel();
  return n;
}

}  // namespace rill::model
