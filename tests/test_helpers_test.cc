// The test helpers themselves. test_seed.h: RILL_TEST_SEED's three forms, the commit's seed against git and
// the shell (`cut -c1-8` of `git rev-parse HEAD`, read as hex), the fixed seed without .git, and the node
// twin (tests/test_seed.mjs) choosing the same seed. shared_data.h: a missing file skips, or fails under
// CI=true, with a message naming the file.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "shared_data.h"
#include "test_seed.h"

namespace rill::testing {
namespace {

namespace fs = std::filesystem;

// stdout of a shell command, without the trailing newline.
std::string shell(const std::string& command) {
  std::string out;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, pipe) != nullptr) out += buf;
    pclose(pipe);
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool source_is_git_checkout() {
  return fs::exists(fs::path(source_dir()) / ".git") &&
         std::system(("git -C '" + source_dir() + "' rev-parse HEAD > /dev/null 2>&1").c_str()) == 0;
}

TEST(TestSeed, ReplaysANumber) {
  EXPECT_EQ(choose_seed("12345", source_dir()).seed, 12345u);
  EXPECT_EQ(choose_seed("0", source_dir()).seed, 0u);
  EXPECT_EQ(choose_seed("4294967295", source_dir()).seed, 4294967295u);
}

TEST(TestSeed, RandomDrawsFreshSeeds) {
  // 8 draws of 32 bits all equal: a 2^-224 event, not a flake.
  const uint32_t first = choose_seed("random", source_dir()).seed;
  bool differs = false;
  for (int i = 0; i < 8; ++i) differs |= choose_seed("random", source_dir()).seed != first;
  EXPECT_TRUE(differs);
  EXPECT_EQ(choose_seed("random", source_dir()).origin, "RILL_TEST_SEED=random");
}

TEST(TestSeed, RejectsAnythingElse) {
  EXPECT_EXIT(choose_seed("12abc", source_dir()), ::testing::ExitedWithCode(2), "RILL_TEST_SEED=12abc");
}

TEST(TestSeed, DefaultIsTheCommitsFirst32Bits) {
  if (!source_is_git_checkout()) GTEST_SKIP() << source_dir() << " is not a git checkout";
  const std::string hex = shell("git -C '" + source_dir() + "' rev-parse HEAD | cut -c1-8");
  ASSERT_EQ(hex.size(), 8u);
  const uint32_t want = static_cast<uint32_t>(std::stoull(shell("printf '%u' 0x" + hex)));
  const SeedChoice got = choose_seed(nullptr, source_dir());
  EXPECT_EQ(got.seed, want);
  EXPECT_EQ(got.origin, "commit " + hex);
  EXPECT_EQ(choose_seed("", source_dir()).seed, want);  // set but empty: unset
}

TEST(TestSeed, FixedSeedWithoutGit) {
  const fs::path dir = fs::temp_directory_path() / ("rill_no_git_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  EXPECT_EQ(choose_seed(nullptr, dir).seed, kNoCommitSeed);
  fs::create_directories(dir / ".git");  // a .git git does not recognise: still the fixed seed
  EXPECT_EQ(choose_seed(nullptr, dir).seed, kNoCommitSeed);
  fs::remove_all(dir);
}

TEST(TestSeed, NodeTestsChooseTheSameSeed) {
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  for (const char* env : {"", "777"}) {
    SCOPED_TRACE(std::string("RILL_TEST_SEED=") + env);
    const std::string line = shell(std::string("RILL_TEST_SEED=") + env + " node --input-type=module -e \"" +
                                   "import { testSeed } from '" + source_dir() + "/tests/test_seed.mjs'; " +
                                   "testSeed('probe');\"");
    // "probe: seed N (ORIGIN; ...)"
    const SeedChoice want = choose_seed(env, source_dir());
    EXPECT_EQ(line.rfind("probe: seed " + std::to_string(want.seed) + " (" + want.origin + ";", 0), 0u)
        << line;
  }
}

TEST(SharedData, NamesTheMissingFileAndHowToGetIt) {
  const std::string m = missing_shared_files({"tokenizers/kimi/no-such.model", "chat_templates/none.jinja"});
  EXPECT_NE(m.find(shared_path("tokenizers/kimi/no-such.model").string()), std::string::npos) << m;
  EXPECT_NE(m.find(shared_path("chat_templates/none.jinja").string()), std::string::npos) << m;
  EXPECT_NE(m.find("Hugging Face"), std::string::npos) << m;
  EXPECT_NE(m.find("-DRILL_SHARED_DIR"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: gtest prints it after 'Skipped'";
  // An absolute path replaces RILL_SHARED_DIR (std::filesystem's operator/): a file that exists.
  EXPECT_EQ(missing_shared_files({source_dir() + "/CMakeLists.txt"}), "");
}

void require_missing_file() {
  RILL_REQUIRE_SHARED_FILES({"no/such/file"});
}

// Runs require_missing_file() with CI set to `ci` (nullptr: unset) and returns the one result it reports.
::testing::TestPartResult result_with_ci(const char* ci) {
  const char* saved = std::getenv("CI");
  const std::string saved_value = saved ? saved : "";
  ci ? setenv("CI", ci, 1) : unsetenv("CI");
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    require_missing_file();
  }
  saved ? setenv("CI", saved_value.c_str(), 1) : unsetenv("CI");
  EXPECT_EQ(results.size(), 1);
  return results.size() ? results.GetTestPartResult(0)
                        : ::testing::TestPartResult(::testing::TestPartResult::kSuccess, "", 0, "");
}

TEST(SharedData, MissingFileSkipsOutsideCi) {
  for (const char* ci : {static_cast<const char*>(nullptr), "", "false", "0"}) {
    const ::testing::TestPartResult r = result_with_ci(ci);
    EXPECT_TRUE(r.skipped()) << "CI=" << (ci ? ci : "(unset)");
    EXPECT_NE(std::string(r.message()).find("no/such/file"), std::string::npos) << r.message();
  }
}

TEST(SharedData, MissingFileFailsUnderCi) {
  for (const char* ci : {"true", "1"}) {
    const ::testing::TestPartResult r = result_with_ci(ci);
    EXPECT_TRUE(r.fatally_failed()) << "CI=" << ci;
    EXPECT_NE(std::string(r.message()).find("no/such/file"), std::string::npos) << r.message();
  }
}

}  // namespace
}  // namespace rill::testing
