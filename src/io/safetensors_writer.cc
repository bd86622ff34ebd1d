// write_safetensors: the same byte layout as the Python `safetensors` writer, so files rill writes (test
// fixtures, converted checkpoints) load in Python and vice versa.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/printable.h"
#include "io/safetensors.h"

namespace rill::io {
namespace {

Status check_tensors(const std::filesystem::path& path, std::span<const NamedTensor> tensors) {
  std::set<std::string_view> names;
  for (const NamedTensor& t : tensors) {
    const std::string who = fmt::format("{}: tensor '{}'", path.string(), printable(t.name));
    if (t.name == "__metadata__") return invalid_argument("{}: the name is reserved for metadata", who);
    if (!names.insert(t.name).second) return invalid_argument("{}: appears twice", who);
    if (t.view.device != Device::Cpu) {
      return invalid_argument("{}: is on {}; only host tensors can be written", who,
                              device_name(t.view.device));
    }
    for (int i = 0; i < t.view.rank(); ++i) {
      if (t.view.shape[i] < 0)
        return invalid_argument("{}: negative dimension in {}", who, t.view.describe());
    }
    if (!t.view.is_contiguous()) return invalid_argument("{}: {} is not contiguous", who, t.view.describe());
    if (t.view.data == nullptr && t.view.numel() != 0) return invalid_argument("{}: has no data", who);
  }
  return {};
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

Status write_all(std::FILE* f, const void* data, size_t n, const std::filesystem::path& path) {
  if (n != 0 && std::fwrite(data, 1, n, f) != n) {
    return invalid_argument("{}: write failed: {}", path.string(), std::strerror(errno));
  }
  return {};
}

}  // namespace

Status write_safetensors(const std::filesystem::path& path, std::span<const NamedTensor> tensors,
                         const std::map<std::string, std::string>& metadata) {
  RILL_TRY(check_tensors(path, tensors));

  // Data is laid out by decreasing element size (stable, so equal sizes keep the caller's order), as the
  // Python writer does: every tensor then starts at a multiple of its element size with no gaps, which
  // the Rust reader requires.
  std::vector<size_t> layout(tensors.size());
  std::iota(layout.begin(), layout.end(), size_t(0));
  std::stable_sort(layout.begin(), layout.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors[a].view.dtype) > dtype_size(tensors[b].view.dtype);
  });
  std::vector<uint64_t> begin(tensors.size());
  uint64_t offset = 0;
  for (size_t i : layout) {
    begin[i] = offset;
    offset += tensors[i].view.nbytes();
  }

  std::string header;
  try {
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    if (!metadata.empty()) h["__metadata__"] = metadata;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorView& v = tensors[i].view;
      nlohmann::ordered_json entry;
      entry["dtype"] = dtype_name(v.dtype);
      entry["shape"] = std::vector<int64_t>(v.shape.begin(), v.shape.end());
      entry["data_offsets"] = {begin[i], begin[i] + v.nbytes()};
      h[tensors[i].name] = std::move(entry);
    }
    header = h.dump();
  } catch (const nlohmann::json::exception& ex) {  // type_error 316: a name or value is not valid UTF-8
    return invalid_argument("{}: cannot encode the header: {}", path.string(), ex.what());
  }
  // Spaces pad the header so the data section starts 8-byte aligned (the Python writer's padding).
  header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t header_len = header.size();

  // Write beside the target and rename, so a failed write never leaves a truncated file under the real name.
  std::filesystem::path tmp = path;
  tmp += fmt::format(".tmp{}", ::getpid());
  {
    std::unique_ptr<std::FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
    if (!f) return invalid_argument("{}: cannot create: {}", tmp.string(), std::strerror(errno));
    Status s = write_all(f.get(), &header_len, 8, tmp);
    if (s.ok()) s = write_all(f.get(), header.data(), header.size(), tmp);
    for (size_t i : layout) {
      if (s.ok()) s = write_all(f.get(), tensors[i].view.data, tensors[i].view.nbytes(), tmp);
    }
    if (s.ok() && std::fflush(f.get()) != 0) {
      s = invalid_argument("{}: write failed: {}", tmp.string(), std::strerror(errno));
    }
    if (s.ok() && std::fclose(f.release()) != 0) {
      s = invalid_argument("{}: close failed: {}", tmp.string(), std::strerror(errno));
    }
    if (!s.ok()) {
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      return s;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    Status s =
        invalid_argument("{}: cannot rename the written file into place: {}", path.string(), ec.message());
    std::filesystem::remove(tmp, ec);
    return s;
  }
  return {};
}

}  // namespace rill::io
