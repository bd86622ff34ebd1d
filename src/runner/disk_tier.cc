#include "runner/disk_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/log.h"
#include "core/sizes.h"
#include "runner/crc32c.h"
#include "runner/disk_file.h"

namespace rill::runner {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTmpPrefix = ".rill-tmp-";
constexpr int kLoggedBadFiles = 8;  // per scan; the rest are counted in one line

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
  if (::fstat(fd, &st) != 0) return unavailable("cannot stat: {}", std::strerror(errno));
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
                  std::strerror(errno));
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
    Result<DiskFileHeader> h = fd.fd < 0 ? Result<DiskFileHeader>(unavailable("cannot open: {}", std::strerror(errno)))
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
                     tmp.string(), std::strerror(err), o_.dir.string());
    } else {
      RILL_LOG_ERROR("disk tier: cannot write {}: {}; that item is not kept on disk", tmp.string(), std::strerror(err));
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

Status DiskTier::read(bool snapshot, uint64_t hash, void* dst) {
  const size_t n = snapshot ? snapshot_bytes_ : block_bytes_;
  const Key k{hash, snapshot};
  {
    std::lock_guard lock(mu_);
    if (auto it = pending_.find(k); it != pending_.end()) {  // not written yet: the queued copy
      std::memcpy(dst, it->second->bytes.data(), n);
      stats_.files_read++;
      stats_.bytes_read += n;
      return {};
    }
    if (!files_.count(k)) return not_found("{} is not on disk", path_of(k).string());
    touch_locked(k);
  }
  const fs::path path = path_of(k);
  const auto t0 = std::chrono::steady_clock::now();
  Status st;
  {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.fd < 0) {
      st = errno == ENOENT ? not_found("gone: {}", std::strerror(errno))
                           : unavailable("cannot open: {}", std::strerror(errno));
    } else {
      Result<DiskFileHeader> h = read_header(fd.fd, fingerprint_, hash, snapshot, n);
      if (!h.ok()) {
        st = h.status();
      } else if (!read_exact(fd.fd, dst, n, off_t(h->size()))) {
        st = invalid_argument("truncated while reading its payload");
      } else if (crc32c(0, dst, n) != h->payload_crc) {
        st = invalid_argument("payload checksum mismatch (corrupt)");
      }
    }
  }
  std::lock_guard lock(mu_);
  stats_.read_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (st.ok()) {
    stats_.files_read++;
    stats_.bytes_read += n;
    return {};
  }
  if (!files_.count(k)) return not_found("{} is not on disk", path.string());  // removed meanwhile (the cap)
  stats_.read_errors++;
  RILL_LOG_ERROR("disk tier: {}: {}; skipped{}, the prefix is computed instead", path.string(), st.message(),
                 writable_ && st.code() != StatusCode::NotFound ? " and removed" : "");
  forget_locked(k, writable_ && st.code() != StatusCode::NotFound);
  return st;
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
