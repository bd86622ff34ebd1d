// Test helpers: the transformers fixtures in tests/data (made by tools/reference/make_kimi_linear_fixtures.py)
// and a CPU model loaded from them.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/model.h"
#include "test_paths.h"

namespace rill::testing {

inline std::filesystem::path data_dir() {
  return std::filesystem::path(rill::testing::source_dir()) / "tests" / "data";
}
inline const std::vector<std::string>& kimi_linear_fixtures() {
  static const std::vector<std::string> names = {"kimi_linear_tiny_a", "kimi_linear_tiny_b"};
  return names;
}

// The Kimi K3 fixtures present in tests/data (kimi_k3_tiny_*/ with a reference.safetensors, made by
// tools/reference/make_kimi_k3_fixtures.py on the GPU machine), sorted; empty until they are committed.
std::vector<std::string> kimi_k3_fixtures();

// The recorded reference of one fixture (reference.safetensors).
class Reference {
 public:
  explicit Reference(const std::filesystem::path& dir);
  int n_prompts() const;
  bool has(const std::string& name) const;
  std::vector<int32_t> ints(const std::string& name) const;
  std::vector<float> floats(const std::string& name) const;
  Shape shape(const std::string& name) const;

 private:
  std::unique_ptr<io::SafetensorsFile> file_;
};

// The fixture model in `dir` on `be`, its workspace reserved for steps of up to 256 tokens, 8 sequences and a
// context of 512 (test failures recorded; null when it cannot load).
std::unique_ptr<model::Model> load_fixture_model(const std::filesystem::path& dir, backend::Backend& be);

// max |a - b| over all elements.
float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace rill::testing
