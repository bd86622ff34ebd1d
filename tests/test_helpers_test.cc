// The test helpers themselves. shared_data.h: a missing file skips, or fails under CI=true, with a message
// naming the file.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "shared_data.h"

namespace rill::testing {
namespace {

TEST(SharedData, NamesTheMissingFileAndHowToGetIt) {
  const std::string m = missing_shared_files({"tokenizers/kimi/no-such.model", "chat_templates/none.jinja"});
  EXPECT_NE(m.find(shared_path("tokenizers/kimi/no-such.model").string()), std::string::npos) << m;
  EXPECT_NE(m.find(shared_path("chat_templates/none.jinja").string()), std::string::npos) << m;
  EXPECT_NE(m.find("Hugging Face"), std::string::npos) << m;
  EXPECT_NE(m.find("-DRILL_SHARED_DIR"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: gtest prints it after 'Skipped'";
  // An absolute path replaces RILL_SHARED_DIR (std::filesystem's operator/): a file that exists.
  EXPECT_EQ(missing_shared_files({RILL_SOURCE_DIR "/CMakeLists.txt"}), "");
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
