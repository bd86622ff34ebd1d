// WeightTable: every checkpoint tensor a model needs, declared by the blocks (one table per block, style.md
// §7.2), with its accepted shapes and dtypes and where it goes. The loader checks the whole table against
// the checkpoint before allocating anything, so `rill inspect` lists every missing, unexpected and
// mis-shaped tensor at once.
#pragma once

#include <string>
#include <unordered_set>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"

namespace rill::model {

// How a tensor is stored once loaded.
enum class WeightRole {
  Matrix,  // a GEMM operand: kept in the backend's matrix dtype (as stored on the CPU, bf16 on CUDA)
  Vector,  // norms, biases, gates, conv taps: converted to F32
  Packed,  // quantised payload (MXFP4 bytes, E8M0 scales): copied bit for bit
};

// The part of a stored tensor that this rank loads (tensor / expert parallelism, issue #17): along dimension
// `dim` of the declared shape, entries [begin, begin + shape[dim]) of the `extent` stored.
struct WeightSlice {
  int dim = -1;  // -1: the whole tensor
  int64_t begin = 0, extent = 0;
};

struct WeightSpec {
  std::string name;             // the checkpoint name
  Shape shape;                  // the shape the model uses (also the destination shape)
  std::vector<Shape> alt_shapes;  // other stored shapes with the same elements (e.g. A_log [1,1,H,1])
  WeightRole role = WeightRole::Matrix;
  TensorView* dest = nullptr;   // filled by the loader (unless part of a stack)
  int stack = -1;               // >= 0: this tensor fills elements of stacks[stack]
  int64_t stack_offset = 0;     // element offset inside the stack
  std::vector<std::string> alt_names;  // other spellings of the same tensor (converted mirrors)
  // The stored tensor may be 1-D and longer than `shape`: only the leading elements are used and the tail
  // must be exactly zero (K3's A_log [128] holding num_heads values, spec §2.5.1).
  bool zero_padded = false;
  WeightSlice slice;

  // The shape stored in the checkpoint: `shape` with the sliced dimension at its full extent.
  Shape stored_shape() const;
  // Keeps part `rank` of `parts` equal parts of dimension `dim` (the declared shape is the whole stored
  // tensor; it becomes the part). The caller has checked that `parts` divides it.
  WeightSpec& split(int dim, int rank, int parts);
};

// A destination assembled from several checkpoint tensors (fused q|k|v, stacked experts).
struct WeightStack {
  Shape shape;
  WeightRole role = WeightRole::Matrix;
  TensorView* dest = nullptr;
};

class WeightTable {
 public:
  // Each returns the new spec so a block can add alternative spellings or padding (valid until the next
  // call).
  WeightSpec& matrix(std::string name, Shape shape, backend::LinearWeight* dst);
  WeightSpec& vector(std::string name, Shape shape, TensorView* dst, std::vector<Shape> alt_shapes = {});
  WeightSpec& packed(std::string name, Shape shape, TensorView* dst);

  // A stack of `shape`; parts are added with stack_part in element order.
  int stack(Shape shape, WeightRole role, TensorView* dst);
  WeightSpec& stack_part(int stack, std::string name, Shape part_shape, int64_t elem_offset,
                         std::vector<Shape> alt_shapes = {});

  // Names the loader may meet and skip (e.g. K3's vision tower); matched as prefixes.
  void ignore_prefix(std::string prefix) { ignored_.push_back(std::move(prefix)); }
  // A tensor of the checkpoint that another rank loads (expert parallelism): present, accepted, not loaded.
  void held_elsewhere(std::string name) { elsewhere_.insert(std::move(name)); }
  // Names starting with `canonical` may also be stored starting with `alt` (K3 mirrors that drop the
  // `language_model.model.layers.` -> `language_model.layers.` level, spec §2.1).
  void alias_prefix(std::string canonical, std::string alt) {
    prefix_aliases_.emplace_back(std::move(canonical), std::move(alt));
  }
  // Every spelling a spec may be stored under, the declared name first.
  std::vector<std::string> candidate_names(const WeightSpec& s) const;

  const std::vector<WeightSpec>& specs() const { return specs_; }
  const std::vector<WeightStack>& stacks() const { return stacks_; }
  // Skipped by prefix, or held by another rank (under any of the prefix aliases' spellings).
  bool ignored(const std::string& name) const;
  int64_t n_params() const;      // parameters of every declared tensor (an MXFP4 byte holds two)
  int64_t stored_bytes() const;  // bf16 for dense tensors, packed bytes and scales as they are

 private:
  std::vector<WeightSpec> specs_;
  std::vector<WeightStack> stacks_;
  std::vector<std::string> ignored_;
  std::unordered_set<std::string> elsewhere_;
  std::vector<std::pair<std::string, std::string>> prefix_aliases_;
};

}  // namespace rill::model
