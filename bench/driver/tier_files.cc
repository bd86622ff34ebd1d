#include "bench/driver/tier_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace rill::bench {
namespace {

namespace fs = std::filesystem;

std::string filesystem_name(int64_t magic, bool* in_memory) {
  *in_memory = false;
  switch (uint32_t(magic)) {
    case 0x01021994u:
      *in_memory = true;
      return "tmpfs";
    case 0x858458f6u:
      *in_memory = true;
      return "ramfs";
    case 0x0000ef53u:
      return "ext4";
    case 0x58465342u:
      return "xfs";
    case 0x9123683eu:
      return "btrfs";
    case 0x794c7630u:
      return "overlayfs";
    case 0x2fc12fc1u:
      return "zfs";
    case 0xf2f52010u:
      return "f2fs";
    case 0x00006969u:
      return "nfs";
    default:
      return fmt::format("filesystem 0x{:x}", uint32_t(magic));
  }
}

// Pages of the open file `fd` (`bytes` long) in the page cache.
int64_t resident_pages(int fd, int64_t bytes, int64_t page) {
  if (bytes <= 0) return 0;
  void* p = ::mmap(nullptr, size_t(bytes), PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return 0;
  std::vector<unsigned char> in((size_t(bytes) + size_t(page) - 1) / size_t(page));
  int64_t n = 0;
  if (::mincore(p, size_t(bytes), in.data()) == 0)
    for (unsigned char c : in) n += c & 1;
  ::munmap(p, size_t(bytes));
  return n;
}

}  // namespace

Result<fs::path> make_fresh_directory(const fs::path& parent_in) {
  std::error_code ec;
  const fs::path parent = parent_in.empty() ? fs::temp_directory_path(ec) : parent_in;
  if (ec) return unavailable("no temporary directory: {}", ec.message());
  fs::create_directories(parent, ec);
  if (ec) return unavailable("cannot create {}: {}", parent.string(), ec.message());
  std::string pattern = (parent / "rill-multi-turn-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr)
    return unavailable("cannot create a directory in {}: {}", parent.string(), std::strerror(errno));
  return fs::path(pattern);
}

Result<TierFiles> inspect_tier_files(const fs::path& dir, bool drop) {
  TierFiles t;
  struct statfs sf {};
  if (::statfs(dir.c_str(), &sf) != 0) return unavailable("{}: {}", dir.string(), std::strerror(errno));
  t.filesystem = filesystem_name(int64_t(sf.f_type), &t.in_memory);
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  int64_t pages = 0, resident = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) == 0) {
      if (drop) {
        // Dirty pages cannot be dropped: write them back first.
        ::fdatasync(fd);
        ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      }
      t.files++;
      t.bytes += st.st_size;
      pages += (st.st_size + page - 1) / page;
      resident += resident_pages(fd, st.st_size, page);
    }
    ::close(fd);
  }
  if (ec) return unavailable("{}: {}", dir.string(), ec.message());
  t.resident = pages > 0 ? double(resident) / double(pages) : 0;
  return t;
}

}  // namespace rill::bench
