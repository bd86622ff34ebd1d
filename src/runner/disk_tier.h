// DiskTier: the prefix cache's disk tier (issue #38, cache/README.md), a directory of files in disk_file.h's
// format below the host tier: MLA blocks and KDA snapshots that leave the host tier are written there by a
// thread of its own (a step never waits on the disk), and a prefix hit that reaches past the host tier reads
// them back into it before the request is admitted, its files read and checked in parallel by the tier's
// reader threads (one stream of reads and checksums is far below what a disk gives to several). The cache
// manager decides what moves; this only keeps the files. Every fault — a directory that cannot be had, a full
// or read-only disk, a corrupt, truncated or foreign file — is one log line naming the file or directory and
// the reason; the item (or the tier) is skipped and the request computed as without it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <thread>
#include <vector>

#include "cache/cache_ops.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace rill::runner {

struct DiskTierOptions {
  std::filesystem::path dir;  // created (with its parents) when missing
  int64_t max_bytes = 0;      // files kept at most (least recently used go first); 0: no cap but the disk's
  // Writes queued but not written yet, at most (copies of host memory): past it a write is dropped, so a
  // slow disk costs cache entries, never a step's time.
  int64_t max_pending_bytes = int64_t(1) << 30;
};

struct DiskTierStats {
  uint64_t files_written = 0, bytes_written = 0, files_read = 0, bytes_read = 0;
  uint64_t write_errors = 0, read_errors = 0, writes_dropped = 0;
  // The caller's (engine thread's) time waiting for file reads (the readers' open, read, checksum),
  // successful or not: wall time per batch of reads, not the sum of the readers' times.
  double read_seconds = 0;
  int64_t files = 0, bytes_on_disk = 0;
  bool writable = false;
};

class DiskTier {
 public:
  // Opens (or creates) the directory and indexes the files in it that `fingerprint` wrote: a directory that
  // cannot be had is an error (the runner then runs without the tier); one that cannot be written to is
  // served read-only, logged. Files that fail their header checks are logged and removed (they are ours).
  static Result<std::unique_ptr<DiskTier>> open(const DiskTierOptions& o, uint64_t fingerprint,
                                                size_t block_bytes, size_t snapshot_bytes);
  ~DiskTier();  // writes what is queued, then stops the writer
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // The files found at start (oldest first); `take_found` hands them over once (the cache manager indexes
  // them; a large directory's token ids are not kept twice).
  const std::vector<cache::DiskRecord>& found() const { return found_; }
  std::vector<cache::DiskRecord> take_found() { return std::move(found_); }
  // Queues a copy of `bytes` (block_bytes or snapshot_bytes of them) for the writer; never waits for the
  // disk unless `wait` (then it waits for room in the queue rather than drop the write: shutdown).
  void write(const cache::DiskWrite& w, const void* bytes, bool wait = false);
  // One item to read: into `dst`, block_bytes or snapshot_bytes of (host tier) memory.
  struct ReadItem {
    bool snapshot = false;
    uint64_t hash = 0;
    void* dst = nullptr;
  };
  // Reads the items into their `dst` and checks them, one status each, on the reader threads and the
  // caller's, returning when all are done; an item still queued is copied from the queue. A corrupt or
  // truncated file is logged (one line) and removed; an item that is not there (never written, or removed by
  // the size cap) is NotFound, not logged. Each item stands alone: one bad file fails only its own item.
  std::vector<Status> read_all(std::span<const ReadItem> items);
  Status read(bool snapshot, uint64_t hash, void* dst);  // read_all of one
  // Waits until every queued write is done (tests, benchmarks).
  void drain();
  DiskTierStats stats() const;
  const std::filesystem::path& dir() const { return o_.dir; }
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  using Key = std::pair<uint64_t, bool>;  // (chain hash, snapshot)
  struct File {
    int64_t bytes = 0;
    uint64_t last_use = 0;
  };
  struct Job {
    cache::DiskWrite item;
    std::vector<char> bytes;
  };
  struct Chunk;
  DiskTier(const DiskTierOptions& o, uint64_t fingerprint, size_t block_bytes, size_t snapshot_bytes);
  void scan();
  void run_writer();
  // Writes one job (the writer thread); with mu_ not held.
  void write_file(const Job& job);
  // Reads and checksums one chunk of a file (a reader thread); touches no member but the immutable ones.
  void read_chunk(Chunk* c) const;
  std::filesystem::path path_of(const Key& k) const;
  void forget_locked(const Key& k, bool remove_file);
  void touch_locked(const Key& k);

  DiskTierOptions o_;
  uint64_t fingerprint_;
  size_t block_bytes_, snapshot_bytes_;
  std::vector<cache::DiskRecord> found_;
  bool writable_ = false;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, File> files_;
  std::set<std::pair<uint64_t, Key>> lru_;  // (last_use, key)
  uint64_t clock_ = 0;
  std::deque<std::shared_ptr<Job>> queue_;
  std::map<Key, std::shared_ptr<Job>> pending_;  // queued or being written
  int64_t pending_bytes_ = 0;
  bool writing_ = false, stop_ = false, writes_off_ = false, warned_behind_ = false;
  DiskTierStats stats_;
  std::thread writer_;
  ThreadPool readers_;  // read_all's threads (the caller is one of them); idle between hits
};

}  // namespace rill::runner
