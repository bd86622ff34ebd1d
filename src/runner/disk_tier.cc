#include "runner/disk_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstring>
#include <system_error>

#include "core/log.h"
#include "core/sizes.h"
#include "runner/crc32c.h"
#include "runner/disk_file.h"

namespace rill::runner {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTmpPrefix = ".rill-tmp-";
constexpr int kLoggedBadFiles = 8;  // per scan; the rest are counted in one line
// Reads in flight at once for one hit (read_all's threads, the caller's among them). A virtio or NVMe disk
// gives several GB/s only to several outstanding requests (one stream of ~0.5 MiB reads gave 1.1 GB/s on the
// H100 host); the readers mostly wait on the disk, so this is not the core count, and each one's CRC-32C
// (SSE4.2, several GB/s) keeps up with its share.
constexpr int kReaders = 8;
// A file is read in pieces of at most this much, each by whichever reader is free: a KDA snapshot (41 MiB on
// the 48B shape) spreads over all readers instead of being one reader's long tail, and a piece is large
// enough that its own open and header check cost nothing beside it.
constexpr size_t kChunkBytes = size_t(4) << 20;

// strerror's text without its shared buffer (the readers run at once).
std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// An fd closed on every path out.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

bool read_exact(int fd, void* dst, size_t n, off_t at) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, at);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r, at += r, n -= size_t(r);
  }
  return true;
}

bool write_all(int fd, const void* src, size_t n) {
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t r = ::write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    p += r, n -= size_t(r);
  }
  return true;
}

// Errors that every later write would meet too: the tier stops writing instead of logging each one.
bool tier_wide(int err) {
  return err == ENOSPC || err == EFBIG || err == EDQUOT || err == EROFS || err == EACCES || err == EPERM;
}

// The header of an open file, checked against what its name and this server expect, and its size.
Result<DiskFileHeader> read_header(int fd, uint64_t fingerprint, uint64_t hash, bool snapshot, size_t payload) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) return unavailable("cannot stat: {}", errno_text(errno));
  std::vector<char> fixed(kDiskHeaderBytes);
  if (uint64_t(st.st_size) < kDiskHeaderBytes || !read_exact(fd, fixed.data(), fixed.size(), 0))
    return invalid_argument("truncated: {} bytes, shorter than the {}-byte header", st.st_size, kDiskHeaderBytes);
  RILL_ASSIGN_OR_RETURN(DiskFileHeader h, decode_disk_header_fixed(fixed));
  std::vector<int32_t> tokens(h.tokens.size());
  if (!read_exact(fd, tokens.data(), tokens.size() * sizeof(int32_t), off_t(kDiskHeaderBytes)))
    return invalid_argument("truncated inside its header ({} bytes)", st.st_size);
  RILL_TRY(finish_disk_header(fixed, tokens, &h));
  if (h.fingerprint != fingerprint)
    return invalid_argument("written for another model or cache layout (fingerprint {:016x}, this server's {:016x})",
                            h.fingerprint, fingerprint);
  if (h.hash != hash || h.snapshot != snapshot)
    return invalid_argument("its header names another item than its file name");
  if (h.payload_bytes != payload)
    return invalid_argument("a payload of {} bytes, this server's {} are {}", h.payload_bytes,
                            snapshot ? "snapshots" : "blocks", payload);
  const uint64_t want = h.size() + payload;
  if (uint64_t(st.st_size) < want)
    return invalid_argument("truncated: {} bytes, the header says {}", st.st_size, want);
  if (uint64_t(st.st_size) > want)
    return invalid_argument("{} bytes past its payload", uint64_t(st.st_size) - want);
  return h;
}

}  // namespace

Result<std::unique_ptr<DiskTier>> DiskTier::open(const DiskTierOptions& o, uint64_t fingerprint, size_t block_bytes,
                                                 size_t snapshot_bytes) {
  if (o.dir.empty()) return invalid_argument("the disk tier needs a directory");
  if (o.max_bytes < 0) return invalid_argument("a disk tier size of {} bytes", o.max_bytes);
  std::error_code ec;
  if (!fs::exists(o.dir, ec)) {
    fs::create_directories(o.dir, ec);
    if (ec) return unavailable("cannot create {}: {}", o.dir.string(), ec.message());
  }
  if (!fs::is_directory(o.dir, ec)) return invalid_argument("{} is not a directory", o.dir.string());
  std::unique_ptr<DiskTier> t(new DiskTier(o, fingerprint, block_bytes, snapshot_bytes));
  // Writable? An empty file says so (a full disk still creates one: its writes fail later, logged then).
  const fs::path probe = o.dir / fmt::format("{}probe-{}", kTmpPrefix, ::getpid());
  const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
    t->writable_ = true;
  } else {
    RILL_LOG_WARN("disk tier {}: not writable ({}); its files are read, none are written", o.dir.string(),
                  errno_text(errno));
  }
  // Readable? (a directory we may not list is no tier at all)
  fs::directory_iterator probe_list(o.dir, ec);
  if (ec) return unavailable("cannot read {}: {}", o.dir.string(), ec.message());
  t->scan();
  t->stats_.writable = t->writable_;
  if (t->writable_) t->writer_ = std::thread([p = t.get()] { p->run_writer(); });
  return t;
}

DiskTier::~DiskTier() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

fs::path DiskTier::path_of(const Key& k) const {
  return o_.dir / disk_file_name({fingerprint_, k.first, k.second});
}

void DiskTier::scan() {
  struct Seen {
    fs::file_time_type mtime;
    DiskFileHeader header;
    int64_t bytes = 0;
  };
  std::vector<Seen> seen;
  int n_foreign = 0, n_bad = 0;
  std::string foreign_example;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(o_.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kTmpPrefix, 0) == 0) {  // a write cut short (a crash): never renamed, never read
      if (writable_) fs::remove(e.path(), ec);
      continue;
    }
    const std::optional<DiskFileName> n = parse_disk_file_name(name);
    if (!n) continue;  // not ours
    if (n->fingerprint != fingerprint_) {  // another model's or layout's: left alone, and never read
      if (n_foreign++ == 0) foreign_example = name;
      continue;
    }
    const size_t payload = n->snapshot ? snapshot_bytes_ : block_bytes_;
    Fd fd(::open(e.path().c_str(), O_RDONLY | O_CLOEXEC));
    Result<DiskFileHeader> h = fd.fd < 0 ? Result<DiskFileHeader>(unavailable("cannot open: {}", errno_text(errno)))
                                         : read_header(fd.fd, fingerprint_, n->hash, n->snapshot, payload);
    if (!h.ok()) {
      if (++n_bad <= kLoggedBadFiles)
        RILL_LOG_WARN("disk tier: {}: {}; skipped{}", e.path().string(), h.status().message(),
                      writable_ ? " and removed" : "");
      if (writable_) fs::remove(e.path(), ec);
      continue;
    }
    const int64_t bytes = int64_t(h->size() + payload);
    seen.push_back({e.last_write_time(ec), std::move(h).value(), bytes});
  }
  if (n_bad > kLoggedBadFiles)
    RILL_LOG_WARN("disk tier {}: {} more files failed their checks; skipped", o_.dir.string(), n_bad - kLoggedBadFiles);
  if (n_foreign > 0)
    RILL_LOG_INFO("disk tier {}: {} files of another model or cache layout left alone (e.g. {})", o_.dir.string(),
                  n_foreign, foreign_example);
  // Oldest first: they are the first to go under the size cap.
  std::sort(seen.begin(), seen.end(), [](const Seen& a, const Seen& b) { return a.mtime < b.mtime; });
  int n_blocks = 0;
  for (Seen& s : seen) {
    const Key k{s.header.hash, s.header.snapshot};
    files_[k] = {s.bytes, ++clock_};
    lru_.insert({clock_, k});
    stats_.files++;
    stats_.bytes_on_disk += s.bytes;
    n_blocks += !s.header.snapshot;
    found_.push_back({s.header.snapshot, s.header.hash, s.header.parent_hash, std::move(s.header.tokens)});
  }
  RILL_LOG_INFO("disk tier {}: {} MLA blocks and {} KDA snapshots found ({}){}{}", o_.dir.string(), n_blocks,
                int(found_.size()) - n_blocks, format_bytes(double(stats_.bytes_on_disk)),
                o_.max_bytes > 0 ? fmt::format(", at most {} kept", format_bytes(double(o_.max_bytes))) : "",
                writable_ ? "" : ", read-only");
  // Over a cap lowered since the last run: the oldest go now.
  while (o_.max_bytes > 0 && stats_.bytes_on_disk > o_.max_bytes && !lru_.empty())
    forget_locked(lru_.begin()->second, writable_);
}

void DiskTier::touch_locked(const Key& k) {
  auto it = files_.find(k);
  if (it == files_.end()) return;
  lru_.erase({it->second.last_use, k});
  it->second.last_use = ++clock_;
  lru_.insert({clock_, k});
}

void DiskTier::forget_locked(const Key& k, bool remove_file) {
  auto it = files_.find(k);
  if (it == files_.end()) return;
  lru_.erase({it->second.last_use, k});
  stats_.files--;
  stats_.bytes_on_disk -= it->second.bytes;
  files_.erase(it);
  if (remove_file) ::unlink(path_of(k).c_str());
}

void DiskTier::write(const cache::DiskWrite& w, const void* bytes, bool wait) {
  const size_t n = w.snapshot ? snapshot_bytes_ : block_bytes_;
  const Key k{w.hash, w.snapshot};
  {
    std::unique_lock lock(mu_);
    if (wait) cv_.wait(lock, [&] { return pending_bytes_ == 0 || pending_bytes_ + int64_t(n) <= o_.max_pending_bytes; });
    if (pending_.count(k)) return;
    if (files_.count(k)) {  // the same tokens' state is on disk already
      touch_locked(k);
      return;
    }
    if (!writable_ || writes_off_) {
      stats_.writes_dropped++;
      return;
    }
    if (pending_bytes_ + int64_t(n) > o_.max_pending_bytes) {
      stats_.writes_dropped++;
      if (!warned_behind_)
        RILL_LOG_WARN("disk tier {}: the writer is {} behind; items leaving the host tier are dropped until it "
                      "catches up", o_.dir.string(), format_bytes(double(pending_bytes_)));
      warned_behind_ = true;
      return;
    }
    pending_bytes_ += int64_t(n);
  }
  auto job = std::make_shared<Job>();
  job->item = w;
  job->bytes.assign(static_cast<const char*>(bytes), static_cast<const char*>(bytes) + n);
  {
    std::lock_guard lock(mu_);
    pending_[k] = job;
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
}

void DiskTier::run_writer() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued is written
      job = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
    }
    write_file(*job);
    {
      std::lock_guard lock(mu_);
      pending_.erase({job->item.hash, job->item.snapshot});
      pending_bytes_ -= int64_t(job->bytes.size());
      writing_ = false;
      if (pending_bytes_ == 0) warned_behind_ = false;
    }
    cv_.notify_all();
  }
}

void DiskTier::write_file(const Job& job) {
  const Key k{job.item.hash, job.item.snapshot};
  DiskFileHeader h;
  h.snapshot = job.item.snapshot;
  h.fingerprint = fingerprint_;
  h.hash = job.item.hash;
  h.parent_hash = job.item.parent_hash;
  h.tokens = job.item.tokens;
  h.payload_bytes = job.bytes.size();
  h.payload_crc = crc32c(0, job.bytes.data(), job.bytes.size());
  const std::vector<char> head = encode_disk_header(h);
  const int64_t total = int64_t(head.size() + job.bytes.size());
  {
    std::lock_guard lock(mu_);
    if (writes_off_) {
      stats_.writes_dropped++;
      return;
    }
    if (o_.max_bytes > 0) {
      if (total > o_.max_bytes) {
        stats_.writes_dropped++;
        return;
      }
      while (stats_.bytes_on_disk + total > o_.max_bytes && !lru_.empty()) forget_locked(lru_.begin()->second, true);
    }
  }
  const fs::path final_path = path_of(k);
  const fs::path tmp = o_.dir / (kTmpPrefix + final_path.filename().string());
  int err = 0;
  {
    Fd fd(::open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644));
    if (fd.fd < 0 || !write_all(fd.fd, head.data(), head.size()) ||
        !write_all(fd.fd, job.bytes.data(), job.bytes.size()))
      err = errno;
    if (fd.fd >= 0 && ::close(fd.fd) != 0 && err == 0) err = errno;
    fd.fd = -1;
  }
  if (err == 0 && ::rename(tmp.c_str(), final_path.c_str()) != 0) err = errno;
  std::lock_guard lock(mu_);
  if (err != 0) {
    ::unlink(tmp.c_str());
    stats_.write_errors++;
    if (tier_wide(err)) {
      writes_off_ = true;
      RILL_LOG_ERROR("disk tier: cannot write {}: {}; no more writes to {} until restart (its files are still read)",
                     tmp.string(), errno_text(err), o_.dir.string());
    } else {
      RILL_LOG_ERROR("disk tier: cannot write {}: {}; that item is not kept on disk", tmp.string(), errno_text(err));
    }
    return;
  }
  files_[k] = {total, ++clock_};
  lru_.insert({clock_, k});
  stats_.files++;
  stats_.bytes_on_disk += total;
  stats_.files_written++;
  stats_.bytes_written += uint64_t(total);
}

// One piece of a file for one reader: `len` payload bytes from `offset`, into the item's destination. Each
// opens the file and checks its header itself, so the pieces need no order among them.
struct DiskTier::Chunk {
  size_t item = 0;  // index into read_all's items
  bool snapshot = false;
  uint64_t hash = 0;
  char* dst = nullptr;  // the item's
  size_t offset = 0, len = 0;
  Status st;
  uint32_t crc = 0, want_crc = 0;  // of this piece; the whole payload's, as the header says
};

DiskTier::DiskTier(const DiskTierOptions& o, uint64_t fingerprint, size_t block_bytes, size_t snapshot_bytes)
    : o_(o), fingerprint_(fingerprint), block_bytes_(block_bytes), snapshot_bytes_(snapshot_bytes),
      readers_(kReaders) {}

void DiskTier::read_chunk(Chunk* c) const {
  // What is read here (o_, fingerprint_, the sizes) never changes after open: no lock.
  const size_t n = c->snapshot ? snapshot_bytes_ : block_bytes_;
  const fs::path path = path_of({c->hash, c->snapshot});
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) {
    const int err = errno;
    c->st = err == ENOENT ? not_found("gone: {}", errno_text(err)) : unavailable("cannot open: {}", errno_text(err));
    return;
  }
  Result<DiskFileHeader> h = read_header(fd.fd, fingerprint_, c->hash, c->snapshot, n);
  if (!h.ok()) {
    c->st = h.status();
    return;
  }
  c->want_crc = h->payload_crc;
  if (!read_exact(fd.fd, c->dst + c->offset, c->len, off_t(h->size() + c->offset))) {
    c->st = invalid_argument("truncated while reading its payload");
    return;
  }
  c->crc = crc32c(0, c->dst + c->offset, c->len);
}

std::vector<Status> DiskTier::read_all(std::span<const ReadItem> items) {
  std::vector<Status> out(items.size());
  std::vector<Chunk> chunks;
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < items.size(); ++i) {
      const ReadItem& it = items[i];
      const size_t n = it.snapshot ? snapshot_bytes_ : block_bytes_;
      const Key k{it.hash, it.snapshot};
      if (auto p = pending_.find(k); p != pending_.end()) {  // not written yet: the queued copy
        std::memcpy(it.dst, p->second->bytes.data(), n);
        stats_.files_read++;
        stats_.bytes_read += n;
        continue;
      }
      if (!files_.count(k)) {
        out[i] = not_found("{} is not on disk", path_of(k).string());
        continue;
      }
      touch_locked(k);
      size_t off = 0;
      do {
        chunks.push_back({i, it.snapshot, it.hash, static_cast<char*>(it.dst), off, std::min(kChunkBytes, n - off)});
        off += kChunkBytes;
      } while (off < n);
    }
  }
  if (chunks.empty()) return out;
  // Longest first, so that no long piece starts last and keeps the others waiting (within an item, in order).
  std::stable_sort(chunks.begin(), chunks.end(), [](const Chunk& a, const Chunk& b) { return a.len > b.len; });
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<size_t> next{0};
  readers_.parallel_for(std::min<int64_t>(readers_.size(), int64_t(chunks.size())), 1, [&](int64_t, int64_t) {
    for (size_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < chunks.size();) read_chunk(&chunks[c]);
  });
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Each item's pieces back in file order: the first failure is the item's, else the joined checksum decides.
  std::stable_sort(chunks.begin(), chunks.end(), [](const Chunk& a, const Chunk& b) {
    return a.item != b.item ? a.item < b.item : a.offset < b.offset;
  });
  std::lock_guard lock(mu_);
  stats_.read_seconds += waited;
  for (size_t b = 0, e; b < chunks.size(); b = e) {
    const size_t i = chunks[b].item;
    Status st;
    uint32_t crc = 0;
    for (e = b; e < chunks.size() && chunks[e].item == i; ++e) {
      if (st.ok() && !chunks[e].st.ok()) st = chunks[e].st;
      crc = e == b ? chunks[e].crc : crc32c_combine(crc, chunks[e].crc, chunks[e].len);
    }
    if (st.ok() && crc != chunks[b].want_crc) st = invalid_argument("payload checksum mismatch (corrupt)");
    const ReadItem& it = items[i];
    const size_t n = it.snapshot ? snapshot_bytes_ : block_bytes_;
    const Key k{it.hash, it.snapshot};
    if (st.ok()) {
      stats_.files_read++;
      stats_.bytes_read += n;
      continue;
    }
    const fs::path path = path_of(k);
    if (!files_.count(k)) {  // removed meanwhile (the cap)
      out[i] = not_found("{} is not on disk", path.string());
      continue;
    }
    stats_.read_errors++;
    RILL_LOG_ERROR("disk tier: {}: {}; skipped{}, the prefix is computed instead", path.string(), st.message(),
                   writable_ && st.code() != StatusCode::NotFound ? " and removed" : "");
    forget_locked(k, writable_ && st.code() != StatusCode::NotFound);
    out[i] = std::move(st);
  }
  return out;
}

Status DiskTier::read(bool snapshot, uint64_t hash, void* dst) {
  const ReadItem item{snapshot, hash, dst};
  return std::move(read_all(std::span<const ReadItem>(&item, 1)).front());
}

void DiskTier::drain() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !writing_; });
}

DiskTierStats DiskTier::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace rill::runner
