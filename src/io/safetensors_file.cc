// SafetensorsFile: maps the whole file read-only and hands out views into the mapping (no copies; the page
// cache is shared between processes that open the same checkpoint).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include "io/safetensors.h"

namespace rill::io {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; views assume it");

// The Python/Rust reference rejects larger headers too (MAX_HEADER_SIZE); a real header is ~100 bytes per
// tensor.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

Status open_error(const std::filesystem::path& path, const char* what, int err) {
  if (err == ENOENT) return not_found("{}: {}: {}", path.string(), what, std::strerror(err));
  return invalid_argument("{}: {}: {}", path.string(), what, std::strerror(err));
}

}  // namespace

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      header_(std::move(o.header_)),
      by_name_(std::move(o.by_name_)),
      map_(std::exchange(o.map_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      data_(std::exchange(o.data_, nullptr)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
    path_ = std::move(o.path_);
    header_ = std::move(o.header_);
    by_name_ = std::move(o.by_name_);
    map_ = std::exchange(o.map_, nullptr);
    size_ = std::exchange(o.size_, 0);
    data_ = std::exchange(o.data_, nullptr);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
}

Result<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string label = path.string();
  // O_NONBLOCK: opening a FIFO named *.safetensors would otherwise block forever before fstat can refuse it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return open_error(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return open_error(path, "cannot stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument("{}: not a regular file", label);
  }
  const uint64_t size = uint64_t(st.st_size);
  if (size < 8) {
    ::close(fd);
    return invalid_argument("{}: file is {} bytes, too short for the 8-byte header length (truncated?)",
                            label, size);
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) return open_error(path, "cannot mmap", map_err);

  SafetensorsFile f;  // owns the mapping from here on, so every error path below unmaps it
  f.path_ = path;
  f.map_ = static_cast<const uint8_t*>(map);
  f.size_ = size;

  uint64_t header_len = 0;
  std::memcpy(&header_len, f.map_, 8);
  if (header_len > size - 8) {
    return invalid_argument(
        "{}: header length {} runs past the end of the {}-byte file (truncated, or not a "
        "safetensors file?)",
        label, header_len, size);
  }
  if (header_len < 2)
    return invalid_argument("{}: header length {} is too small for a JSON object", label, header_len);
  if (header_len > kMaxHeaderBytes) {
    return invalid_argument("{}: header length {} exceeds the {}-byte limit", label, header_len,
                            kMaxHeaderBytes);
  }
  const std::string_view header_json(reinterpret_cast<const char*>(f.map_ + 8), header_len);
  RILL_ASSIGN_OR_RETURN(f.header_, parse_safetensors_header(header_json, size - 8 - header_len, label));
  f.data_ = f.map_ + 8 + header_len;
  for (size_t i = 0; i < f.header_.tensors.size(); ++i) f.by_name_.emplace(f.header_.tensors[i].name, i);
  return f;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &header_.tensors[it->second];
}

TensorView SafetensorsFile::view(const TensorInfo& info) const {
  // Views are typed as mutable (TensorView has one pointer type), but the pages are PROT_READ: writing
  // through one faults, which is the point.
  return TensorView::make(const_cast<uint8_t*>(data_ + info.offset), info.dtype, info.shape, Device::Cpu);
}

}  // namespace rill::io
