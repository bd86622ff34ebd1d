// Named intermediates (style.md §7.2, llama.cpp's cb()): blocks call cx.tap("kda.qkv", view) after each step;
// with a TapRecorder attached (tests, debugging) every tap is copied to the host in order, so two runs (CPU vs
// CUDA, rill vs a reference dump) can be compared tensor by tensor and the first divergence named. Without a
// recorder a tap costs one branch.
//
// A recorder can also replay values into named intermediates (overrides). Tests use it for the MoE routing
// decisions only: top-k selection is discontinuous, so bf16 rounding noise flips near-tied experts and the two
// runs would then compute different functions; replaying one run's expert ids and weights into the other keeps
// every other op comparable at the model level (the router itself is compared op by op in tests/backend).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace rill::model {

class TapRecorder {
 public:
  struct Tap {
    std::string name;  // "L3.kda.qkv"
    Shape shape;
    DType dtype;  // as the backend stored it
    std::vector<float> values;
  };
  // Applies an override named `name` to `v` if there is one, then copies `v` (contiguous) to the host.
  void record(backend::Backend& be, std::string name, const TensorView& v);
  const std::vector<Tap>& taps() const { return taps_; }
  void clear() { taps_.clear(); }

  void set_overrides(std::map<std::string, std::vector<float>> overrides) { overrides_ = std::move(overrides); }

  // Rounds every F32 tap `which` selects to bf16 in place, before it is recorded: a CPU run that stores the
  // intermediates the GPU stores in bf16 the way the GPU does. It measures how far a model moves under the
  // roundings of a bf16 implementation alone (the yardstick the GPU-vs-CPU errors are read against).
  void set_bf16_rounding(std::function<bool(std::string_view name)> which) { round_bf16_ = std::move(which); }

 private:
  std::vector<Tap> taps_;
  std::map<std::string, std::vector<float>> overrides_;
  std::function<bool(std::string_view)> round_bf16_;
};

}  // namespace rill::model
