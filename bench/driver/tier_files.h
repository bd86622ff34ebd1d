// The disk tier's directory as `rill bench --multi-turn` sees it: a fresh one per run (files of an earlier
// run would be hits, since the bench's tokens are seeded), and where its reads after a restart will come
// from. A restarted server usually finds its files still in the page cache; after a reboot they come from the
// disk, so the bench can drop them from the cache first and says which it measured.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "core/status.h"

namespace rill::bench {

// A new empty directory `parent`/rill-multi-turn-XXXXXX (`parent` created if missing; empty: the system's
// temporary directory).
Result<std::filesystem::path> make_fresh_directory(const std::filesystem::path& parent);

struct TierFiles {
  int64_t files = 0, bytes = 0;
  double resident = 0;     // fraction of their pages in the page cache (mincore), after any drop
  std::string filesystem;  // statfs: "tmpfs", "ext4", "xfs", ... or the magic number in hex
  bool in_memory = false;  // tmpfs or ramfs: reading these files never touches a disk
};

// The regular files in `dir` and how much of them is in the page cache; with `drop`, first writes their dirty
// pages back and asks the kernel to drop their cached pages (fdatasync, posix_fadvise DONTNEED), so the next
// reads come from the disk (not on tmpfs, which is memory).
Result<TierFiles> inspect_tier_files(const std::filesystem::path& dir, bool drop);

}  // namespace rill::bench
