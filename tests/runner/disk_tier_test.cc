// The disk tier's files (issue #38): CRC-32C against its published check value; items written in the
// background come back bit for bit, from the queue before they are written and from the files after, also
// through a new DiskTier over the same directory (a restart), which rebuilds each block's chain data from the
// headers; and every fault is one log line and a skipped item, never a wrong one: a corrupt payload, a
// truncated file, a file of another model (by name and by header), a size cap, a full disk (RLIMIT_FSIZE:
// writes fail with EFBIG), a read-only directory (a child process without root's rights) and a directory that
// cannot be created.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "runner/crc32c.h"
#include "runner/disk_file.h"
#include "runner/disk_tier.h"
#include "temp_dir.h"
#include "test_seed.h"

namespace rill::runner {
namespace {

namespace fs = std::filesystem;
using rill::testing::test_seed;

constexpr size_t kBlockBytes = 3000, kSnapshotBytes = 8000;
constexpr uint64_t kFingerprint = 0x1234abcd5678ef01ull;

using rill::testing::TempDir;

std::unique_ptr<DiskTier> open_tier(const fs::path& dir, uint64_t fp = kFingerprint, int64_t max_bytes = 0) {
  DiskTierOptions o;
  o.dir = dir;
  o.max_bytes = max_bytes;
  auto t = DiskTier::open(o, fp, kBlockBytes, kSnapshotBytes);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::vector<char> random_bytes(std::mt19937& rng, size_t n) {
  std::vector<char> b(n);
  for (char& c : b) c = char(rng());
  return b;
}

cache::DiskWrite block_write(uint64_t hash, uint64_t parent, std::mt19937& rng) {
  cache::DiskWrite w;
  w.hash = hash;
  w.parent_hash = parent;
  for (int i = 0; i < 64; ++i) w.tokens.push_back(int32_t(rng() % 1000));
  return w;
}

fs::path file_of(const fs::path& dir, uint64_t hash, bool snapshot, uint64_t fp = kFingerprint) {
  return dir / disk_file_name({fp, hash, snapshot});
}

TEST(Crc32c, MatchesTheCheckValueAndContinues) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32c(0, s.data(), s.size()), 0xE3069283u);  // CRC-32C's published check value
  EXPECT_EQ(crc32c(crc32c(0, s.data(), 4), s.data() + 4, 5), 0xE3069283u);
  std::mt19937 rng(test_seed());
  const std::vector<char> big = random_bytes(rng, 10007);  // the 8-byte path and the tail
  uint32_t bytewise = 0;
  for (char c : big) bytewise = crc32c(bytewise, &c, 1);
  EXPECT_EQ(crc32c(0, big.data(), big.size()), bytewise);
}

TEST(DiskFile, NamesRoundTripAndOthersAreNotOurs) {
  const DiskFileName n{kFingerprint, 0xfedcba9876543210ull, true};
  const auto back = parse_disk_file_name(disk_file_name(n));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->fingerprint, n.fingerprint);
  EXPECT_EQ(back->hash, n.hash);
  EXPECT_TRUE(back->snapshot);
  for (const char* other : {"notes.txt", "rill-xyz.blk", "rill-1234abcd5678ef01-fedcba9876543210.tmp",
                            ".rill-tmp-rill-1234abcd5678ef01-fedcba9876543210.blk"})
    EXPECT_FALSE(parse_disk_file_name(other)) << other;
}

// Written items come back from the queue at once, from the files once written, and through a new tier over
// the same directory, with each block's chain data from its header.
TEST(DiskTier, ItemsComeBackBitForBitAlsoAfterARestart) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  TempDir dir;
  const cache::DiskWrite a = block_write(11, 0, rng), b = block_write(22, 11, rng);
  cache::DiskWrite snap;
  snap.snapshot = true;
  snap.hash = 22;
  const auto bytes_a = random_bytes(rng, kBlockBytes), bytes_b = random_bytes(rng, kBlockBytes);
  const auto bytes_s = random_bytes(rng, kSnapshotBytes);
  std::vector<char> out(kSnapshotBytes);
  {
    auto t = open_tier(dir.path);
    ASSERT_TRUE(t);
    EXPECT_TRUE(t->found().empty());
    t->write(a, bytes_a.data());
    t->write(b, bytes_b.data());
    t->write(snap, bytes_s.data());
    ASSERT_TRUE(t->read(false, 11, out.data()).ok());  // queued or written: either way the same bytes
    EXPECT_TRUE(std::equal(bytes_a.begin(), bytes_a.end(), out.begin()));
    t->drain();
    const DiskTierStats st = t->stats();
    EXPECT_EQ(st.files, 3);
    EXPECT_EQ(st.files_written, 3u);
    EXPECT_EQ(st.write_errors, 0u);
    ASSERT_TRUE(t->read(true, 22, out.data()).ok());
    EXPECT_TRUE(std::equal(bytes_s.begin(), bytes_s.end(), out.begin()));
    EXPECT_EQ(t->read(false, 33, out.data()).code(), StatusCode::NotFound);
  }
  auto t = open_tier(dir.path);
  ASSERT_TRUE(t);
  ASSERT_EQ(t->found().size(), 3u);
  for (const cache::DiskRecord& r : t->found()) {
    if (r.snapshot) {
      EXPECT_EQ(r.hash, 22u);
      continue;
    }
    const cache::DiskWrite& w = r.hash == 11 ? a : b;
    EXPECT_EQ(r.parent_hash, w.parent_hash);
    EXPECT_EQ(r.tokens, w.tokens);
  }
  ASSERT_TRUE(t->read(false, 22, out.data()).ok());
  EXPECT_TRUE(std::equal(bytes_b.begin(), bytes_b.end(), out.begin()));
  EXPECT_EQ(t->stats().read_errors, 0u);
}

// A flipped payload byte fails the checksum when read: logged with the file and reason, removed, NotFound
// after; a truncated file is found by the start-up scan (its size against the header) and skipped.
TEST(DiskTier, CorruptAndTruncatedFilesAreSkippedWithALine) {
  std::mt19937 rng(test_seed());
  TempDir dir;
  {
    auto t = open_tier(dir.path);
    ASSERT_TRUE(t);
    t->write(block_write(1, 0, rng), random_bytes(rng, kBlockBytes).data());
    t->write(block_write(2, 1, rng), random_bytes(rng, kBlockBytes).data());
  }
  {  // corrupt block 1's last payload byte
    std::fstream f(file_of(dir.path, 1, false), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x5a' ^ char(f.peek()));
  }
  fs::resize_file(file_of(dir.path, 2, false), fs::file_size(file_of(dir.path, 2, false)) - 10);
  ::testing::internal::CaptureStderr();
  auto t = open_tier(dir.path);
  ASSERT_TRUE(t);
  std::vector<char> out(kBlockBytes);
  const Status st = t->read(false, 1, out.data());
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(t->found().size(), 1u);  // the truncated one is skipped at the scan
  EXPECT_NE(log.find(file_of(dir.path, 2, false).string() + ": truncated"), std::string::npos) << log;
  EXPECT_FALSE(st.ok());
  EXPECT_NE(log.find(file_of(dir.path, 1, false).string() + ": payload checksum mismatch"), std::string::npos) << log;
  EXPECT_EQ(t->stats().read_errors, 1u);
  EXPECT_FALSE(fs::exists(file_of(dir.path, 1, false)));
  EXPECT_FALSE(fs::exists(file_of(dir.path, 2, false)));
  EXPECT_EQ(t->read(false, 1, out.data()).code(), StatusCode::NotFound);
}

// Another fingerprint's files are left alone (by name); one of ours by name whose header says otherwise (a
// copied file) is skipped naming both fingerprints.
TEST(DiskTier, AnotherModelsFilesAreNeverRead) {
  std::mt19937 rng(test_seed());
  TempDir dir;
  const uint64_t other = kFingerprint ^ 1;
  {
    auto t = open_tier(dir.path, other);
    ASSERT_TRUE(t);
    t->write(block_write(7, 0, rng), random_bytes(rng, kBlockBytes).data());
    t->write(block_write(8, 7, rng), random_bytes(rng, kBlockBytes).data());
  }
  fs::copy_file(file_of(dir.path, 8, false, other), file_of(dir.path, 8, false));
  ::testing::internal::CaptureStderr();
  auto t = open_tier(dir.path);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->found().empty());
  EXPECT_NE(log.find("2 files of another model or cache layout left alone"), std::string::npos) << log;
  EXPECT_NE(log.find(file_of(dir.path, 8, false).string() + ": written for another model"), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(file_of(dir.path, 7, false, other)));  // theirs stay
}

// Under a size cap the least recently used files go; an item larger than the cap is not written.
TEST(DiskTier, ASizeCapRemovesTheLeastRecentlyUsed) {
  std::mt19937 rng(test_seed());
  TempDir dir;
  const int64_t file_bytes = int64_t(kDiskHeaderBytes + 64 * 4 + kBlockBytes);
  auto t = open_tier(dir.path, kFingerprint, 2 * file_bytes);
  ASSERT_TRUE(t);
  std::vector<char> out(kSnapshotBytes);
  t->write(block_write(1, 0, rng), random_bytes(rng, kBlockBytes).data());
  t->write(block_write(2, 1, rng), random_bytes(rng, kBlockBytes).data());
  t->drain();
  ASSERT_TRUE(t->read(false, 1, out.data()).ok());  // 1 is now more recent than 2
  t->write(block_write(3, 2, rng), random_bytes(rng, kBlockBytes).data());
  cache::DiskWrite snap;
  snap.snapshot = true;
  snap.hash = 3;
  t->write(snap, random_bytes(rng, kSnapshotBytes).data());  // 8 KB: over the cap on its own
  t->drain();
  EXPECT_EQ(t->read(false, 2, out.data()).code(), StatusCode::NotFound);
  EXPECT_TRUE(t->read(false, 1, out.data()).ok());
  EXPECT_TRUE(t->read(false, 3, out.data()).ok());
  EXPECT_EQ(t->read(true, 3, out.data()).code(), StatusCode::NotFound);
  const DiskTierStats st = t->stats();
  EXPECT_EQ(st.files, 2);
  EXPECT_LE(st.bytes_on_disk, 2 * file_bytes);
  EXPECT_EQ(st.writes_dropped, 1u);
  EXPECT_EQ(st.read_errors, 0u);
}

// A full disk, really: RLIMIT_FSIZE below one file, SIGXFSZ ignored, so write(2) fails with EFBIG. One line
// names the file and the reason, the tier stops writing (later items are dropped), reads go on.
TEST(DiskTier, AFullDiskStopsTheWritesWithOneLine) {
  std::mt19937 rng(test_seed());
  TempDir dir;
  auto t = open_tier(dir.path);
  ASSERT_TRUE(t);
  t->write(block_write(1, 0, rng), random_bytes(rng, kBlockBytes).data());
  t->drain();
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = 1000;
  auto* old_handler = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  ::testing::internal::CaptureStderr();
  t->write(block_write(2, 1, rng), random_bytes(rng, kBlockBytes).data());
  t->drain();
  t->write(block_write(3, 2, rng), random_bytes(rng, kBlockBytes).data());
  t->drain();
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(log.find("File too large; no more writes to " + dir.path.string()), std::string::npos) << log;
  const DiskTierStats st = t->stats();
  EXPECT_EQ(st.write_errors, 1u);
  EXPECT_EQ(st.writes_dropped, 1u);
  EXPECT_EQ(st.files, 1);
  std::vector<char> out(kBlockBytes);
  EXPECT_TRUE(t->read(false, 1, out.data()).ok());
  EXPECT_EQ(t->read(false, 2, out.data()).code(), StatusCode::NotFound);
  for (const auto& e : fs::directory_iterator(dir.path))  // no partial file left behind
    EXPECT_EQ(e.path().filename().string().rfind(".rill-tmp-", 0), std::string::npos) << e.path();
}

// A read-only directory (a child process without root's rights, so the permission bits count) is served
// read-only: its files are read, none are written, one line says so.
TEST(DiskTier, AReadOnlyDirectoryIsReadButNotWritten) {
  std::mt19937 rng(test_seed());
  TempDir dir;
  const auto bytes = random_bytes(rng, kBlockBytes);
  {
    auto t = open_tier(dir.path);
    ASSERT_TRUE(t);
    t->write(block_write(1, 0, rng), bytes.data());
  }
  fs::permissions(dir.path, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                                fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(dir.path.parent_path(), fs::perms::others_exec, fs::perm_options::add);
  const cache::DiskWrite next = block_write(2, 1, rng);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the child: as nobody when root; exit code 0 only if every check holds
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(10);
    DiskTierOptions o;
    o.dir = dir.path;
    auto t = DiskTier::open(o, kFingerprint, kBlockBytes, kSnapshotBytes);
    if (!t.ok()) ::_exit(11);
    if ((*t)->stats().writable || (*t)->found().size() != 1) ::_exit(12);
    std::vector<char> out(kBlockBytes);
    if (!(*t)->read(false, 1, out.data()).ok() || out != bytes) ::_exit(13);
    (*t)->write(next, bytes.data());
    (*t)->drain();
    if ((*t)->stats().writes_dropped != 1 || (*t)->stats().write_errors != 0) ::_exit(14);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 10) GTEST_SKIP() << "root's rights cannot be dropped here (setuid)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "11: open, 12: not read-only or files not found, 13: read, "
                                       "14: a write was not dropped";
}

// A directory that cannot be had is an error (the runner then runs without the tier); a missing one is made.
TEST(DiskTier, ADirectoryThatCannotBeCreatedIsRefusedAndAMissingOneIsMade) {
  TempDir dir;
  std::ofstream(dir.path / "a_file") << "x";
  DiskTierOptions o;
  o.dir = dir.path / "a_file" / "cache";
  auto t = DiskTier::open(o, kFingerprint, kBlockBytes, kSnapshotBytes);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("cannot create " + o.dir.string()), std::string::npos) << t.status().message();
  o.dir = dir.path / "a_file";
  t = DiskTier::open(o, kFingerprint, kBlockBytes, kSnapshotBytes);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("is not a directory"), std::string::npos) << t.status().message();
  o.dir = dir.path / "new" / "cache";
  t = DiskTier::open(o, kFingerprint, kBlockBytes, kSnapshotBytes);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_TRUE(fs::is_directory(o.dir));
  EXPECT_TRUE((*t)->stats().writable);
}

}  // namespace
}  // namespace rill::runner
