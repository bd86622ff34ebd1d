// gtest's main for every rill_test program, plus one thing: a program whose tests all skipped (no GPU, no
// shared test data) exits 77, which rill_test registers as ctest's SKIP_RETURN_CODE, so ctest lists the whole
// program as skipped instead of passed. The skip reasons are in the program's output (`[  SKIPPED ]`).
// Besides gtest's flags it takes `--backend-option key=value` (repeatable; test_backend_options.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace rill::testing {
namespace {
std::vector<std::string> backend_options;
}  // namespace
const std::vector<std::string>& backend_option_args() {
  return backend_options;
}
}  // namespace rill::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  constexpr const char* kFlag = "--backend-option";
  for (int i = 1; i < argc; ++i) {
    const size_t n = std::strlen(kFlag);
    if (std::strncmp(argv[i], kFlag, n) == 0 && argv[i][n] == '=') {
      rill::testing::backend_options.emplace_back(argv[i] + n + 1);
    } else if (std::strcmp(argv[i], kFlag) == 0 && i + 1 < argc) {
      rill::testing::backend_options.emplace_back(argv[++i]);
    } else {
      std::fprintf(stderr, "unknown argument %s (gtest's flags, or --backend-option key=value)\n", argv[i]);
      return 2;
    }
  }
  for (const std::string& o : rill::testing::backend_options)
    std::printf("[ backend option ] %s\n", o.c_str());
  const int status = RUN_ALL_TESTS();
  const ::testing::UnitTest& run = *::testing::UnitTest::GetInstance();
  if (status == 0 && run.successful_test_count() == 0 && run.skipped_test_count() > 0) return 77;
  return status;
}
