// WeightTable: every checkpoint tensor a model needs, declared by the blocks (one table per block, style.md
// §7.2), with its accepted shapes and dtypes and where it goes. The loader checks the whole table against
// the checkpoint before allocating anything, so `rill inspect` lists every missing, unexpected and
// mis-shaped tensor at once.
#pragma once

#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "model/weights/fp8_plan.h"

namespace rill::model {

// How a tensor is stored once loaded.
enum class WeightRole {
  Matrix,  // a GEMM operand: kept in the backend's matrix dtype (as stored on the CPU, bf16 on CUDA)
  Vector,  // norms, biases, gates, conv taps: converted to F32
  Packed,  // quantised payload (MXFP4 bytes, E8M0 scales): copied bit for bit
  Fp8Scale,  // an FP8 matrix's scale tensor: checked here, loaded (as F32) by its matrix's spec
};

// How an FP8 plan (Fp8Plan) stores and loads one matrix.
struct Fp8Load {
  bool stored = false;  // the checkpoint holds F8_E4M3 codes scaled by specs[scale_spec] in blocks stored_block
  bool target = false;  // loaded as FP8 codes + F32 scales in blocks target_block (in a stack: the stack's)
  backend::Fp8Blocks stored_block, target_block;
  int scale_spec = -1;
  backend::LinearWeight* linear = nullptr;  // outside a stack: receives format, block and scales
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
  Fp8Load fp8;  // matrices under an Fp8Plan

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
  // Matrix stacks: where an FP8 stack's scales, format and blocks go, and the rows every part is a multiple of
  // (FP8 blocks never span two parts).
  TensorView* scales = nullptr;
  backend::WeightFormat* format = nullptr;
  backend::Fp8Blocks* block = nullptr;
  int64_t row_unit = 0;
  bool fp8_target = false;  // every part is an FP8 target (decided as parts are declared)
  bool fp8_seen = false;
  backend::Fp8Blocks fp8_block;
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
  // A stack of matrices that may be FP8 (whole parts of `row_unit` rows each): a fused LinearWeight, or
  // stacked experts (their codes, scales, format and blocks).
  int matrix_stack(Shape shape, backend::LinearWeight* dst, int64_t row_unit);
  int matrix_stack(Shape shape, TensorView* dst, TensorView* scales, backend::WeightFormat* format,
                   backend::Fp8Blocks* block, int64_t row_unit);

  // FP8 weights (issue #35): set before the blocks declare; every matrix declared after asks the plan.
  void set_fp8_plan(Fp8Plan plan) { fp8_plan_.emplace(std::move(plan)); }
  const std::optional<Fp8Plan>& fp8_plan() const { return fp8_plan_; }
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
  // Bytes once loaded with `matrix_bytes` per dense matrix element (2: bf16 on CUDA): FP8 targets 1 per element
  // plus 4 per scale, vectors 4 (F32), packed as stored. `rill inspect` and the start-up plan show it.
  int64_t loaded_bytes(int matrix_bytes) const;
  int64_t loaded_bytes_of(const WeightSpec& s, int matrix_bytes) const;

 private:
  std::vector<WeightSpec> specs_;
  std::vector<WeightStack> stacks_;
  std::vector<std::string> ignored_;
  std::unordered_set<std::string> elsewhere_;
  std::vector<std::pair<std::string, std::string>> prefix_aliases_;
  std::optional<Fp8Plan> fp8_plan_;
  void declare_fp8(size_t spec);  // applies the plan to specs_[spec] (a matrix or a matrix stack's part)
};

}  // namespace rill::model
