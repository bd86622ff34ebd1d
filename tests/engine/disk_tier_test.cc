// The prefix cache's disk tier through the engine (issue #38), for Kimi Linear and Kimi K3 checkpoints: with
// a device pool of 6 blocks, a 1 MiB snapshot budget and a host tier of a few snapshots, conversations are
// pushed through the host tier onto disk and come back from it, and a second engine over the same directory
// (a restart) answers a returning conversation from its files; every output equals the computation without
// caching, token for token and within the logits bound. Each fault is one log line, the tier or the item
// skipped and the request computed as without it, and caching otherwise unaffected: corrupt and truncated
// files, another model's files, a full disk (RLIMIT_FSIZE), a read-only directory, a directory that cannot be
// had, a host tier that cannot be had, a size cap smaller than one file.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/prefix_cache_harness.h"
#include "temp_dir.h"

namespace rill::engine {
namespace {

namespace fs = std::filesystem;

using rill::testing::TempDir;

class PrefixCacheDisk : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { current_fixture = GetParam(); }
};

// The failure cases: the disk tier's handling is the same for both families (tests/runner covers the files);
// one family keeps the suite fast.
bool fault_fixture() { return current_fixture == "kimi_linear_tiny_b"; }

// A host tier of one or two KDA snapshots (half of it) and three blocks: most of what leaves the device goes on
// to disk. A disk hit is read into the host tier whole, so three blocks (a returning 200-token turn) must fit.
double small_host_gib() { return current_fixture.rfind("kimi_k3", 0) == 0 ? 2.5 / 1024 : 1.5 / 1024; }

EngineOptions disk_options(const fs::path& dir, double host_gib = small_host_gib()) {
  EngineOptions o = caching(64, 64, 2);
  o.num_kv_blocks = 6;
  o.kda_snapshot_budget_mib = 1;
  o.kv_offloading_gib = host_gib;
  o.kv_offloading_dir = dir.string();
  return o;
}

std::vector<fs::path> files_with(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ext) out.push_back(e.path());
  return out;
}

// A first turn, then the engine goes (persisting its caches to disk); returns the second turn's prompt.
std::vector<int32_t> first_turn_then_shutdown(const fs::path& dir, std::mt19937& rng, EngineOptions o) {
  const auto prompt = random_tokens(rng, 200);
  {
    Harness first(current_fixture, o);
    const Outcome r = first.run(prompt, 6);
    expect_same(r, reference(prompt, 6), "first turn");
  }
  EXPECT_FALSE(files_with(dir, ".blk").empty());
  EXPECT_FALSE(files_with(dir, ".snap").empty());
  return concat(concat(prompt, reference(prompt, 6).ids), random_tokens(rng, 30));
}

// Three conversations of three turns interleaved: each one's blocks and snapshots are pushed off the device
// and out of the host tier by the others before it returns, and come back from disk.
TEST_P(PrefixCacheDisk, ConversationsComeBackFromTheDiskTier) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  TempDir dir;
  Harness on(current_fixture, disk_options(dir.path));
  ASSERT_TRUE(on.engine().stats().disk_tier);
  ASSERT_GT(on.engine().stats().host_tier_snapshots_total, 0);
  const int returning_hits = interleaved_conversations(on, rng);
  ASSERT_TRUE(on.engine().persist_prefix_cache().ok());
  const EngineStats st = on.engine().stats();
  EXPECT_EQ(returning_hits, 6);  // every returning turn resumes from its previous one
  EXPECT_GT(st.prefix_cache_hits_disk, 0u);
  EXPECT_GT(st.kv_offload_bytes_to_disk, 0u);
  EXPECT_GT(st.kv_offload_bytes_from_disk, 0u);
  EXPECT_LE(st.prefix_cache_hits_host + st.prefix_cache_hits_disk, st.prefix_cache_hits);
  EXPECT_GT(st.disk_tier_files, 0);
  EXPECT_EQ(st.disk_tier_write_errors + st.disk_tier_read_errors, 0u);
}

// A second engine over the same directory (a restart) answers the returning conversation from the files the
// first one left, and the first turn's prompt again too; then, persisted again, from disk in the same engine.
TEST_P(PrefixCacheDisk, ARestartedEngineAnswersFromDisk) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  TempDir dir;
  const std::vector<int32_t> second = first_turn_then_shutdown(dir.path, rng, disk_options(dir.path));
  Harness again(current_fixture, disk_options(dir.path));
  const Outcome r = again.run(second, 6);
  expect_same(r, reference(second, 6), "second turn after the restart");
  EXPECT_EQ(r.cached, 192);  // the first turn's 206 tokens: 3 blocks, a snapshot at the last
  EngineStats st = again.engine().stats();
  EXPECT_EQ(st.prefix_cache_hits_disk, 192u);
  EXPECT_EQ(st.prefix_cache_hits_host, 0u);
  EXPECT_GT(st.kv_offload_bytes_from_disk, 0u);
  ASSERT_TRUE(again.engine().persist_prefix_cache().ok());
  EXPECT_EQ(again.engine().stats().host_tier_blocks, 0);
  const Outcome third = again.run(second, 6);
  expect_same(third, reference(second, 6), "the same prompt, persisted to disk");
  EXPECT_GE(third.cached, 192);
  st = again.engine().stats();
  EXPECT_GE(st.prefix_cache_hits_disk, 192u + 192u);
  EXPECT_EQ(st.disk_tier_read_errors, 0u);
}

// Corrupt block files fail their checksum when read: one line each naming the file, the hit is cut there (no
// disk hit), the output is the uncached one, and the prompt's own blocks are cached again as usual.
TEST_P(PrefixCacheDisk, CorruptFilesAreSkippedAndTheRequestComputed) {
  if (!fault_fixture()) GTEST_SKIP() << "covered on kimi_linear_tiny_b";
  std::mt19937 rng(test_seed());
  TempDir dir;
  const std::vector<int32_t> second = first_turn_then_shutdown(dir.path, rng, disk_options(dir.path));
  for (const fs::path& f : files_with(dir.path, ".blk")) {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(-3, std::ios::end);
    const char c = char(io.get());
    io.seekp(-3, std::ios::end);
    io.put(char(c ^ 0x40));
  }
  Harness again(current_fixture, disk_options(dir.path));
  ::testing::internal::CaptureStderr();
  const Outcome r = again.run(second, 6);
  const std::string log = ::testing::internal::GetCapturedStderr();
  expect_same(r, reference(second, 6), "with corrupt files");
  EXPECT_EQ(r.cached, 0);
  EXPECT_NE(log.find(".blk: payload checksum mismatch (corrupt); skipped and removed"), std::string::npos) << log;
  const EngineStats st = again.engine().stats();
  EXPECT_GE(st.disk_tier_read_errors, 1u);
  EXPECT_EQ(st.prefix_cache_hits_disk, 0u);
  const Outcome repeat = again.run(second, 6);  // cached on the device by the first run, as without the tier
  expect_same(repeat, reference(second, 6), "again");
  EXPECT_GT(repeat.cached, 0);
}

// Truncated snapshot files are found by the start-up scan (their size against the header), logged and skipped:
// the blocks alone resume nothing, so the request is computed.
TEST_P(PrefixCacheDisk, TruncatedFilesAreSkippedAtStart) {
  if (!fault_fixture()) GTEST_SKIP() << "covered on kimi_linear_tiny_b";
  std::mt19937 rng(test_seed());
  TempDir dir;
  const std::vector<int32_t> second = first_turn_then_shutdown(dir.path, rng, disk_options(dir.path));
  for (const fs::path& f : files_with(dir.path, ".snap")) fs::resize_file(f, fs::file_size(f) / 2);
  ::testing::internal::CaptureStderr();
  Harness again(current_fixture, disk_options(dir.path));
  const Outcome r = again.run(second, 6);
  const std::string log = ::testing::internal::GetCapturedStderr();
  expect_same(r, reference(second, 6), "with truncated snapshots");
  EXPECT_EQ(r.cached, 0);
  EXPECT_NE(log.find(".snap: truncated: "), std::string::npos) << log;
  EXPECT_TRUE(files_with(dir.path, ".snap").empty());  // removed (they were ours)
}

// Another checkpoint never reads the files: Kimi K3's tiny fixture and the same weights with every expert
// routed (only config.json differs) have different fingerprints, so the second engine leaves the first one's
// files alone and computes.
TEST_P(PrefixCacheDisk, AnotherModelsFilesAreLeftAlone) {
  if (!fault_fixture()) GTEST_SKIP() << "runs once (on Kimi K3 fixtures)";
  std::mt19937 rng(test_seed());
  TempDir dir;
  current_fixture = "kimi_k3_tiny_a";
  const std::vector<int32_t> second = first_turn_then_shutdown(dir.path, rng, disk_options(dir.path));
  const size_t n_files = files_with(dir.path, ".blk").size() + files_with(dir.path, ".snap").size();
  current_fixture = "kimi_k3_tiny_a_all_experts";
  ::testing::internal::CaptureStderr();
  {
    Harness other(current_fixture, disk_options(dir.path));
    const Outcome r = other.run(second, 6);
    expect_same(r, reference(second, 6), "another model over the same directory");
    EXPECT_EQ(r.cached, 0);
    EXPECT_EQ(other.engine().stats().prefix_cache_hits_disk, 0u);
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find(fmt::format("{} files of another model or cache layout left alone", n_files)), std::string::npos)
      << log;
  current_fixture = "kimi_k3_tiny_a";
  Harness back(current_fixture, disk_options(dir.path));  // the first model's files are all there
  EXPECT_EQ(back.run(second, 6).cached, 192);
}

// A full disk, really: RLIMIT_FSIZE below one file and SIGXFSZ ignored, so the writer's write(2) fails with
// EFBIG; the tier stops writing, the requests are computed as without it, and nothing is left on disk.
TEST_P(PrefixCacheDisk, AFullDiskCostsOnlyTheTier) {
  if (!fault_fixture()) GTEST_SKIP() << "covered on kimi_linear_tiny_b";
  std::mt19937 rng(test_seed());
  TempDir dir;
  const auto prompt = random_tokens(rng, 200);
  const Outcome want = reference(prompt, 6);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = 4096;  // under one block file; above what the test itself writes meanwhile
  auto* old_handler = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  EngineStats st;
  Outcome again;
  {
    Harness on(current_fixture, disk_options(dir.path));
    expect_same(on.run(prompt, 6), want, "first");
    ASSERT_TRUE(on.engine().persist_prefix_cache().ok());
    again = on.run(prompt, 6);
    st = on.engine().stats();
  }
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(st.disk_tier_write_errors, 1u);  // then no more writes
  EXPECT_GT(st.disk_tier_writes_dropped, 0u);
  EXPECT_EQ(st.disk_tier_files, 0);
  expect_same(again, want, "after the failed writes");
  EXPECT_EQ(again.cached, 0);  // persisted (to a disk that took nothing): computed
  EXPECT_TRUE(files_with(dir.path, ".blk").empty());
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 0);
}

// A read-only directory: the files there are read — a restart still answers from them — and nothing is
// written. The permission bits only bind a process without root's rights, so the check runs in a fresh process
// (this program again, as nobody when root: a fork alone would inherit the CPU backend's thread pool) that
// runs PrefixCacheDiskChild below.
TEST_P(PrefixCacheDisk, AReadOnlyDirectoryIsServedReadOnly) {
  if (!fault_fixture()) GTEST_SKIP() << "covered on kimi_linear_tiny_b";
  std::mt19937 rng(test_seed());
  TempDir dir, scratch;
  const std::vector<int32_t> second = first_turn_then_shutdown(dir.path, rng, disk_options(dir.path));
  const auto n_files = std::distance(fs::directory_iterator(dir.path), fs::directory_iterator());
  {
    std::ofstream prompt(scratch.path / "prompt");
    for (int32_t t : second) prompt << t << ' ';
  }
  const auto rx = fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read | fs::perms::group_exec |
                  fs::perms::others_read | fs::perms::others_exec;
  fs::permissions(dir.path, rx);
  fs::permissions(scratch.path, fs::perms::all);  // the child's verdict goes there
  const std::string env = "RILL_DISK_RO_CHILD=" + dir.path.string() + "\n" + scratch.path.string();
  fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(126);
    char* const argv[] = {const_cast<char*>("prefix_cache_tests"),
                          const_cast<char*>("--gtest_filter=PrefixCacheDiskChild.*"), nullptr};
    std::vector<char*> envp;
    for (char** e = environ; *e; ++e) envp.push_back(*e);
    envp.push_back(const_cast<char*>(env.c_str()));
    envp.push_back(nullptr);
    ::execve("/proc/self/exe", argv, envp.data());
    ::_exit(127);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 126) GTEST_SKIP() << "root's rights cannot be dropped here (setuid)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's checks failed (its output is above); 127: exec";
  EXPECT_TRUE(fs::exists(scratch.path / "passed")) << "the child did not run its checks";
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), n_files);
}

// The child of AReadOnlyDirectoryIsServedReadOnly (skipped on its own).
TEST(PrefixCacheDiskChild, ServesAReadOnlyDirectory) {
  const char* env = std::getenv("RILL_DISK_RO_CHILD");
  if (!env) GTEST_SKIP() << "runs as the child of PrefixCacheDisk.AReadOnlyDirectoryIsServedReadOnly";
  const std::string arg = env;
  const fs::path dir = arg.substr(0, arg.find('\n')), scratch = arg.substr(arg.find('\n') + 1);
  current_fixture = "kimi_linear_tiny_b";
  std::vector<int32_t> prompt;
  std::ifstream in(scratch / "prompt");
  for (int32_t t; in >> t;) prompt.push_back(t);
  ASSERT_FALSE(prompt.empty());
  ::testing::internal::CaptureStderr();
  Harness ro(current_fixture, disk_options(dir));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("disk tier " + dir.string() + ": not writable (Permission denied)"), std::string::npos) << log;
  ASSERT_TRUE(ro.engine().stats().disk_tier);
  const Outcome r = ro.run(prompt, 6);
  expect_same(r, reference(prompt, 6), "from a read-only directory");
  EXPECT_EQ(r.cached, 192);
  std::vector<int32_t> longer = prompt;  // new blocks and snapshots: what the tier would write
  for (int32_t t = 1; t <= 80; ++t) longer.push_back(t);
  expect_same(ro.run(longer, 6), reference(longer, 6), "a longer prompt");
  ASSERT_TRUE(ro.engine().persist_prefix_cache().ok());
  const EngineStats st = ro.engine().stats();
  EXPECT_GT(st.disk_tier_writes_dropped, 0u);
  EXPECT_EQ(st.disk_tier_write_errors, 0u);
  if (!::testing::Test::HasFailure()) std::ofstream(scratch / "passed") << "ok";
}

// A directory that cannot be had (its parent is a file) is one line; the engine runs with the host tier only.
TEST_P(PrefixCacheDisk, ADirectoryThatCannotBeHadLeavesTheHostTier) {
  if (!fault_fixture()) GTEST_SKIP() << "covered on kimi_linear_tiny_b";
  std::mt19937 rng(test_seed());
  TempDir dir;
  std::ofstream(dir.path / "a_file") << "x";
  const fs::path bad = dir.path / "a_file" / "cache";
  EngineOptions o = caching(64, 64, 2);
  o.kv_offloading_gib = 0.02;
  o.kv_offloading_dir = bad.string();
  ::testing::internal::CaptureStderr();
  Harness on(current_fixture, o);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("--kv-offloading-dir " + bad.string() + ": cannot create " + bad.string()), std::string::npos)
      << log;
  EXPECT_NE(log.find("running without the disk tier"), std::string::npos) << log;
  EngineStats st = on.engine().stats();
  EXPECT_FALSE(st.disk_tier);
  EXPECT_GT(st.host_tier_blocks_total, 0);
  const auto prompt = random_tokens(rng, 200);
  expect_same(on.run(prompt, 4), reference(prompt, 4), "first");
  ASSERT_TRUE(on.engine().offload_prefix_cache().ok());
  const Outcome again = on.run(prompt, 4);
  expect_same(again, reference(prompt, 4), "from the host tier");
  EXPECT_EQ(again.cached, 192);
}

// A host tier that cannot be had takes the disk tier below it too: one line each, caching on the device goes on.
TEST_P(PrefixCacheDisk, AHostTierThatCannotBeHadTakesTheDiskTierWithIt) {
  if (!fault_fixture()) GTEST_SKIP() << "covered on kimi_linear_tiny_b";
  std::mt19937 rng(test_seed());
  TempDir dir;
  ::testing::internal::CaptureStderr();
  Harness on(current_fixture, disk_options(dir.path, double(1 << 30)));  // an exbibyte
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("running without the host tier"), std::string::npos) << log;
  EXPECT_NE(log.find("the disk tier sits below the host tier, which this server runs without"), std::string::npos)
      << log;
  EXPECT_FALSE(on.engine().stats().disk_tier);
  const auto prompt = random_tokens(rng, 150);
  expect_same(on.run(prompt, 4), reference(prompt, 4), "first");
  const Outcome again = on.run(prompt, 4);
  expect_same(again, reference(prompt, 4), "again");
  EXPECT_EQ(again.cached, 128);
}

// A size cap below one file: nothing is written (each item dropped), the requests are computed as without it.
TEST_P(PrefixCacheDisk, ASizeCapBelowOneFileWritesNothing) {
  if (!fault_fixture()) GTEST_SKIP() << "covered on kimi_linear_tiny_b";
  std::mt19937 rng(test_seed());
  TempDir dir;
  EngineOptions o = disk_options(dir.path);
  o.kv_offloading_disk_gib = 1.0 / (1 << 20);  // 1 KiB
  Harness on(current_fixture, o);
  const auto prompt = random_tokens(rng, 200);
  expect_same(on.run(prompt, 6), reference(prompt, 6), "first");
  ASSERT_TRUE(on.engine().persist_prefix_cache().ok());
  const Outcome again = on.run(prompt, 6);
  expect_same(again, reference(prompt, 6), "again");
  EXPECT_EQ(again.cached, 0);
  const EngineStats st = on.engine().stats();
  EXPECT_GT(st.disk_tier_writes_dropped, 0u);
  EXPECT_EQ(st.disk_tier_files, 0);
  EXPECT_EQ(st.disk_tier_write_errors, 0u);
}

TEST(PrefixCacheDiskOptions, ADiskTierNeedsTheHostTier) {
  auto be = backend::make_cpu_backend();
  auto m = model::load_model(model_dir("kimi_linear_tiny_b"), *be);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EngineOptions o = caching(64, 64, 1);
  o.kv_offloading_dir = "/tmp/somewhere";
  auto e = Engine::create(std::move(m).value(), nullptr, o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("needs --kv-offloading-size"), std::string::npos) << e.status().message();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PrefixCacheDisk,
                         ::testing::Values("kimi_linear_tiny_b", "kimi_k3_tiny_a_all_experts"));

}  // namespace
}  // namespace rill::engine
