// The disk tier's readers (issue #38): a hit of many files, one of them larger than a reader's piece (so read
// by several readers and its checksum joined), comes back bit for bit through read_all; one corrupt,
// truncated or vanished file among many fails only its own item, with one line each. CRC-32C's join against
// the checksum of the whole. A timing print of a 48B-shaped hit (disabled: it writes 430 MB; run it with
// --gtest_also_run_disabled_tests --gtest_filter='*Timing*').
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
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
using rill::testing::TempDir;
using rill::testing::test_seed;

constexpr uint64_t kFingerprint = 0x0ddba11cafe5eedull;
constexpr size_t kBlockBytes = 5000;
// Two whole 4 MiB pieces and a short one (disk_tier.cc's kChunkBytes).
constexpr size_t kSnapshotBytes = (size_t(9) << 20) + 12345;
constexpr int kBlocks = 40;

std::unique_ptr<DiskTier> open_tier(const fs::path& dir, size_t block_bytes = kBlockBytes,
                                    size_t snapshot_bytes = kSnapshotBytes) {
  DiskTierOptions o;
  o.dir = dir;
  auto t = DiskTier::open(o, kFingerprint, block_bytes, snapshot_bytes);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::vector<char> random_bytes(std::mt19937& rng, size_t n) {
  std::vector<char> b(n);
  for (char& c : b) c = char(rng());
  return b;
}

fs::path file_of(const fs::path& dir, uint64_t hash, bool snapshot) {
  return dir / disk_file_name({kFingerprint, hash, snapshot});
}

void flip_byte(const fs::path& f, std::streamoff at) {
  std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(at);
  const char c = char(io.get());
  io.seekp(at);
  io.put(char(c ^ 0x21));
}

// A chain of kBlocks blocks (hashes 1..kBlocks) and a snapshot after the last, written and on disk.
struct Chain {
  std::vector<std::vector<char>> blocks;
  std::vector<char> snapshot;
  Chain(const fs::path& dir, std::mt19937& rng) {
    auto t = open_tier(dir);
    if (!t) return;
    for (int i = 1; i <= kBlocks; ++i) {
      cache::DiskWrite w;
      w.hash = uint64_t(i);
      w.parent_hash = uint64_t(i - 1);
      for (int k = 0; k < 16; ++k) w.tokens.push_back(int32_t(rng() % 1000));
      blocks.push_back(random_bytes(rng, kBlockBytes));
      t->write(w, blocks.back().data(), /*wait=*/true);
    }
    cache::DiskWrite s;
    s.snapshot = true;
    s.hash = kBlocks;
    snapshot = random_bytes(rng, kSnapshotBytes);
    t->write(s, snapshot.data(), /*wait=*/true);
    t->drain();
  }
};

// Destinations for the chain's items (and one missing block, hash 999) and their read items.
struct Hit {
  std::vector<std::vector<char>> out;
  std::vector<DiskTier::ReadItem> items;
  Hit() {
    for (int i = 1; i <= kBlocks + 1; ++i) {
      out.emplace_back(kBlockBytes);
      items.push_back({false, uint64_t(i == kBlocks + 1 ? 999 : i), out.back().data()});
    }
    out.emplace_back(kSnapshotBytes);
    items.push_back({true, uint64_t(kBlocks), out.back().data()});
  }
};

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(Crc32c, JoinsThePiecesChecksums) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::vector<char> b = random_bytes(rng, 100003);
  const uint32_t whole = crc32c(0, b.data(), b.size());
  for (size_t cut : {size_t(0), size_t(1), size_t(7), size_t(4096), size_t(rng() % b.size()), b.size()})
    EXPECT_EQ(
        crc32c_combine(crc32c(0, b.data(), cut), crc32c(0, b.data() + cut, b.size() - cut), b.size() - cut),
        whole)
        << "cut at " << cut;
}

// A restarted tier reads the whole hit from its files: every block, the snapshot in three pieces; a block
// that is not there is NotFound, unlogged; the stats count the files and the caller's wait.
TEST(DiskTierReaders, AHitOfManyFilesComesBackBitForBit) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  TempDir dir;
  const Chain chain(dir.path, rng);
  ASSERT_EQ(chain.blocks.size(), size_t(kBlocks));
  auto t = open_tier(dir.path);
  ASSERT_TRUE(t);
  Hit hit;
  ::testing::internal::CaptureStderr();
  const std::vector<Status> st = t->read_all(hit.items);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(st.size(), hit.items.size());
  for (int i = 0; i < kBlocks; ++i) {
    EXPECT_TRUE(st[size_t(i)].ok()) << i << ": " << st[size_t(i)].to_string();
    EXPECT_EQ(hit.out[size_t(i)], chain.blocks[size_t(i)]) << "block " << i + 1;
  }
  EXPECT_EQ(st[kBlocks].code(), StatusCode::NotFound);
  EXPECT_TRUE(st.back().ok()) << st.back().to_string();
  EXPECT_EQ(hit.out.back(), chain.snapshot);
  EXPECT_EQ(log.find("disk tier: "), std::string::npos) << log;
  const DiskTierStats s = t->stats();
  EXPECT_EQ(s.files_read, uint64_t(kBlocks + 1));
  EXPECT_EQ(s.bytes_read, uint64_t(kBlocks) * kBlockBytes + kSnapshotBytes);
  EXPECT_EQ(s.read_errors, 0u);
  EXPECT_GT(s.read_seconds, 0);
}

// A corrupt block, a truncated block, a vanished block and a snapshot corrupt in its second piece, among
// many: each fails its own item only, one line each (the snapshot's three pieces give one), the bad files
// removed (the vanished one: nothing to remove, not logged as removed); every other item is read bit for bit.
TEST(DiskTierReaders, BadFilesAmongManyFailOnlyTheirOwnItems) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  TempDir dir;
  const Chain chain(dir.path, rng);
  ASSERT_EQ(chain.blocks.size(), size_t(kBlocks));
  std::uniform_int_distribution<int> pick(1, kBlocks / 3);
  const int corrupt = pick(rng), truncated = corrupt + pick(rng), vanished = truncated + pick(rng);
  SCOPED_TRACE("corrupt " + std::to_string(corrupt) + ", truncated " + std::to_string(truncated) +
               ", vanished " + std::to_string(vanished));
  auto t = open_tier(dir.path);  // the scan sees them whole: the damage comes after
  ASSERT_TRUE(t);
  ASSERT_EQ(t->found().size(), size_t(kBlocks + 1));
  flip_byte(file_of(dir.path, uint64_t(corrupt), false),
            std::streamoff(fs::file_size(file_of(dir.path, 1, false)) - 100));
  fs::resize_file(file_of(dir.path, uint64_t(truncated), false),
                  fs::file_size(file_of(dir.path, uint64_t(truncated), false)) - 10);
  fs::remove(file_of(dir.path, uint64_t(vanished), false));
  flip_byte(file_of(dir.path, kBlocks, true), std::streamoff(64 + (size_t(4) << 20) + 777));
  Hit hit;
  ::testing::internal::CaptureStderr();
  const std::vector<Status> st = t->read_all(hit.items);
  const std::string log = ::testing::internal::GetCapturedStderr();
  for (int i = 1; i <= kBlocks; ++i) {
    const Status& s = st[size_t(i - 1)];
    if (i == corrupt || i == truncated || i == vanished) {
      EXPECT_FALSE(s.ok()) << i;
      EXPECT_EQ(count(log, file_of(dir.path, uint64_t(i), false).string() + ": "), 1u) << i << "\n" << log;
      continue;
    }
    EXPECT_TRUE(s.ok()) << i << ": " << s.to_string();
    EXPECT_EQ(hit.out[size_t(i - 1)], chain.blocks[size_t(i - 1)]) << "block " << i;
    EXPECT_TRUE(fs::exists(file_of(dir.path, uint64_t(i), false))) << i;
  }
  const std::string snap = file_of(dir.path, kBlocks, true).string();
  EXPECT_FALSE(st.back().ok());
  EXPECT_EQ(count(log, snap + ": payload checksum mismatch (corrupt); skipped and removed"), 1u) << log;
  EXPECT_EQ(count(log, file_of(dir.path, uint64_t(corrupt), false).string() +
                           ": payload checksum mismatch (corrupt); skipped and removed"),
            1u)
      << log;
  EXPECT_EQ(count(log, file_of(dir.path, uint64_t(truncated), false).string() + ": truncated"), 1u) << log;
  EXPECT_EQ(count(log, file_of(dir.path, uint64_t(vanished), false).string() + ": gone"), 1u) << log;
  EXPECT_EQ(count(log, "disk tier: "), 4u) << log;
  for (const fs::path& f : {file_of(dir.path, uint64_t(corrupt), false),
                            file_of(dir.path, uint64_t(truncated), false), file_of(dir.path, kBlocks, true)})
    EXPECT_FALSE(fs::exists(f)) << f;
  const DiskTierStats s = t->stats();
  EXPECT_EQ(s.read_errors, 4u);
  EXPECT_EQ(s.files_read, uint64_t(kBlocks - 3));
  EXPECT_EQ(s.files, kBlocks - 3);
  // Forgotten: asked again, NotFound without a line.
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(t->read(false, uint64_t(corrupt), hit.out[0].data()).code(), StatusCode::NotFound);
  EXPECT_EQ(t->read(true, kBlocks, hit.out.back().data()).code(), StatusCode::NotFound);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

// Items still queued for the writer come from the queue, beside others read from files, in one call.
TEST(DiskTierReaders, QueuedAndWrittenItemsComeBackTogether) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  TempDir dir;
  const Chain chain(dir.path, rng);
  auto t = open_tier(dir.path);
  ASSERT_TRUE(t);
  std::vector<std::vector<char>> more;
  for (int i = 0; i < 8; ++i) {
    cache::DiskWrite w;
    w.hash = uint64_t(1000 + i);
    w.parent_hash = uint64_t(999 + i);
    w.tokens.assign(16, i);
    more.push_back(random_bytes(rng, kBlockBytes));
    t->write(w, more.back().data());
  }
  std::vector<std::vector<char>> out(kBlocks + 8, std::vector<char>(kBlockBytes));
  std::vector<DiskTier::ReadItem> items;
  for (int i = 0; i < kBlocks + 8; ++i)
    items.push_back({false, uint64_t(i < kBlocks ? i + 1 : 1000 + i - kBlocks), out[size_t(i)].data()});
  const std::vector<Status> st = t->read_all(items);
  for (int i = 0; i < kBlocks + 8; ++i) {
    ASSERT_TRUE(st[size_t(i)].ok()) << i << ": " << st[size_t(i)].to_string();
    EXPECT_EQ(out[size_t(i)], i < kBlocks ? chain.blocks[size_t(i)] : more[size_t(i - kBlocks)]) << i;
  }
  t->drain();
  EXPECT_EQ(t->stats().files, kBlocks + 1 + 8);
}

// Drops a file's pages from the page cache (as the multi-turn bench does), so that a read goes to the disk.
void drop_from_page_cache(const fs::path& f) {
  const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Not a test: prints the read rate of hits shaped as on the 48B model (133 MLA blocks of 504 KiB and one 41
// MiB KDA snapshot each), written, dropped from the page cache, and read by a restarted tier, item by item
// through read() (one file after another, as before the readers) and through read_all; and CRC-32C's own
// rate.
TEST(DiskTierTiming, DISABLED_ReadsA48BShapedHit) {
  constexpr size_t kBlock = 504 << 10, kSnapshot = size_t(41) << 20;
  constexpr int kHits = 4, kHitBlocks = 133;
  TempDir dir("rill_disk_timing");
  std::mt19937 rng(1);
  const std::vector<char> noise = random_bytes(rng, kSnapshot);
  {
    auto t = open_tier(dir.path, kBlock, kSnapshot);
    ASSERT_TRUE(t);
    for (int h = 0; h < kHits; ++h) {
      for (int i = 0; i < kHitBlocks; ++i) {
        cache::DiskWrite w;
        w.hash = uint64_t(h * 1000 + i + 1);
        w.parent_hash = i == 0 ? 0 : w.hash - 1;
        w.tokens.assign(64, i);
        t->write(w, noise.data() + size_t(i) * 4096, true);
      }
      cache::DiskWrite s;
      s.snapshot = true;
      s.hash = uint64_t(h * 1000 + kHitBlocks);
      t->write(s, noise.data(), true);
    }
    t->drain();
  }
  for (const auto& e : fs::directory_iterator(dir.path)) drop_from_page_cache(e.path());
  auto t = open_tier(dir.path, kBlock, kSnapshot);
  ASSERT_TRUE(t);
  std::vector<char> dst(size_t(kHitBlocks) * kBlock + kSnapshot);
  auto items_of = [&](int h) {
    std::vector<DiskTier::ReadItem> items;
    for (int i = 0; i < kHitBlocks; ++i)
      items.push_back({false, uint64_t(h * 1000 + i + 1), dst.data() + size_t(i) * kBlock});
    items.push_back({true, uint64_t(h * 1000 + kHitBlocks), dst.data() + size_t(kHitBlocks) * kBlock});
    return items;
  };
  const double hit_bytes = double(dst.size());
  for (int h = 0; h < kHits; ++h) {
    const bool one_by_one = h < kHits / 2;
    const auto t0 = std::chrono::steady_clock::now();
    for (const DiskTier::ReadItem& it : items_of(h)) {
      if (!one_by_one) break;
      ASSERT_TRUE(t->read(it.snapshot, it.hash, it.dst).ok());
    }
    if (!one_by_one) {
      for (const Status& s : t->read_all(items_of(h))) ASSERT_TRUE(s.ok()) << s.to_string();
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("hit %d (%s): %.1f MiB in %.1f ms, %.2f GB/s\n", h,
                one_by_one ? "read() one by one" : "read_all", hit_bytes / (1 << 20), sec * 1e3,
                hit_bytes / sec / 1e9);
  }
  const auto t0 = std::chrono::steady_clock::now();
  uint32_t c = 0;
  for (int r = 0; r < 8; ++r) c = crc32c(c, noise.data(), noise.size());
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("crc32c: %.2f GB/s (%08x)\n", 8 * double(noise.size()) / sec / 1e9, c);
}

}  // namespace
}  // namespace rill::runner
