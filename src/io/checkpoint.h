// A Hugging Face checkpoint directory: config.json plus weights in one `model.safetensors`, in shards
// listed by `model.safetensors.index.json`, or in `*.safetensors` files without an index.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "io/safetensors.h"

namespace rill::io {

class Checkpoint {
 public:
  struct Entry {
    const TensorInfo* info = nullptr;
    const SafetensorsFile* file = nullptr;
  };

  // Opens every weight file of `dir` (validating each header) and builds the name index. A directory with
  // no weight files opens fine with has_weights() == false (rill inspect on a bare config.json). Errors:
  // unreadable files, an index naming a missing file or a tensor its shard lacks, a tensor in two files.
  // With an index, a shard tensor the index does not list (or puts elsewhere) and a shard name outside `dir`
  // are errors too; weight files the index does not name (reference.safetensors) are ignored.
  static Result<Checkpoint> open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  bool has_weights() const { return !files_.empty(); }
  const Entry* find(std::string_view name) const;
  std::vector<std::string> names() const;  // sorted
  size_t n_tensors() const { return entries_.size(); }
  uint64_t total_bytes() const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  TensorView view(const Entry& e) const { return e.file->view(*e.info); }

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<std::pair<std::string, Entry>> entries_;  // sorted by name
};

// Reads and parses a JSON file; errors name the file (and line/column for syntax errors).
Result<nlohmann::ordered_json> read_json_file(const std::filesystem::path& path);

}  // namespace rill::io
