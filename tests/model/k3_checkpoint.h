// Test helpers for Kimi K3: a fresh tiny K3 checkpoint in the real layout (model/random_checkpoint), and
// copies of a checkpoint with its config or tensors edited (malformed-checkpoint tests).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/random_checkpoint.h"

namespace rill::testing {

// A directory under the temp dir, removed when the object goes.
class TempDir {
 public:
  explicit TempDir(const std::string& tag)
      : path_(std::filesystem::temp_directory_path() / ("rill_" + tag + "_" + std::to_string(getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline constexpr int kTinyK3Vocab = 512;

// The tiny K3 (vocab 512) written into `dir` with `seed`, sharded over `n_shards` files with an index.
inline Status write_tiny_k3(const std::filesystem::path& dir, uint64_t seed, int n_shards = 2) {
  return model::write_random_checkpoint(dir, model::tiny_kimi_k3_config(kTinyK3Vocab, 1, 2), seed, n_shards);
}

using TensorEdit = std::function<void(std::vector<io::NamedTensor>&, std::vector<HostTensor>&)>;
using ConfigEdit = std::function<void(nlohmann::ordered_json&)>;

// Copies the checkpoint in `src` to `dst` as one model.safetensors, after `edit_tensors` changed the tensor
// list (new tensors go into `owned`) and `edit_config` the config.
inline Status copy_checkpoint(const std::filesystem::path& src, const std::filesystem::path& dst,
                              const TensorEdit& edit_tensors, const ConfigEdit& edit_config = {}) {
  std::filesystem::create_directories(dst);
  RILL_ASSIGN_OR_RETURN(auto config, io::read_json_file(src / "config.json"));
  if (edit_config) edit_config(config);
  std::ofstream(dst / "config.json") << config.dump(2) << "\n";
  RILL_ASSIGN_OR_RETURN(io::Checkpoint ckpt, io::Checkpoint::open(src));
  std::vector<io::NamedTensor> tensors;
  std::vector<HostTensor> owned;
  for (const auto& n : ckpt.names()) tensors.push_back({n, ckpt.view(*ckpt.find(n))});
  if (edit_tensors) edit_tensors(tensors, owned);
  return io::write_safetensors(dst / "model.safetensors", tensors);
}

// The tensor named `name` in the list (nullptr if absent).
inline io::NamedTensor* find_tensor(std::vector<io::NamedTensor>& t, const std::string& name) {
  for (auto& x : t)
    if (x.name == name) return &x;
  return nullptr;
}

}  // namespace rill::testing
