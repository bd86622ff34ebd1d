// safetensors files: a zero-copy mmap reader with strict validation, and a writer.
// Format: 8-byte little-endian header length N, N bytes of JSON header, then the data section.
// Header: {"__metadata__": {str: str}, "<name>": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]},
// ...} with offsets relative to the data section.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace rill::io {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t offset = 0;  // byte offset of the tensor's data from the start of the data section
  uint64_t nbytes = 0;
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // sorted by offset
  std::map<std::string, std::string> metadata;
};

// Parses and validates a header: JSON syntax, known dtypes, non-negative integer shapes, offsets inside the
// data section, shape × dtype size == byte length, no overlapping tensors, no duplicate names.
// `label` (usually the file path) starts every error message; errors name the tensor.
// Also refused: rank > kMaxRank, element counts past int64, unknown or repeated fields, a header not starting
// with '{'. Accepted: gaps between tensors (the format allows them), empty tensors at any offset.
// Safe on untrusted input (no recursion, no DOM); the fuzz test in tests/io/ feeds it mutated headers.
Result<SafetensorsHeader> parse_safetensors_header(std::string_view header_json, uint64_t data_bytes,
                                                   std::string_view label);

// A memory-mapped, validated safetensors file. Views point into the mapping and live as long as the file.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::filesystem::path& path);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const TensorInfo* find(std::string_view name) const;
  TensorView view(const TensorInfo& info) const;  // a CPU view into the mapping
  uint64_t file_size() const { return size_; }

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> by_name_;
  const uint8_t* map_ = nullptr;
  uint64_t size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data section
};

struct NamedTensor {
  std::string name;
  TensorView view;  // contiguous, host
};

// Writes tensors in the given order (data 8-byte aligned, as the Python writer does). Header entries follow
// the given order; in the data section tensors are ordered by decreasing element size (stable), so each
// starts at a multiple of its element size without gaps. Writes `path`.tmp<pid> and renames it into place.
// Refuses non-host or non-contiguous views, views without data, duplicate names and "__metadata__" as a name.
Status write_safetensors(const std::filesystem::path& path, std::span<const NamedTensor> tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace rill::io
