// gtest's main for every rill_test program, plus one thing: a program whose tests all skipped (no GPU, no
// shared test data) exits 77, which rill_test registers as ctest's SKIP_RETURN_CODE, so ctest lists the whole
// program as skipped instead of passed. The skip reasons are in the program's output (`[  SKIPPED ]`).
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int status = RUN_ALL_TESTS();
  const ::testing::UnitTest& run = *::testing::UnitTest::GetInstance();
  if (status == 0 && run.successful_test_count() == 0 && run.skipped_test_count() > 0) return 77;
  return status;
}
