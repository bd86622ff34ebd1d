#include "test_paths.h"

namespace rill::testing {

// The three strings come from tests/CMakeLists.txt (rill_test_paths), for this file only.
const std::string& source_dir() {
  static const std::string dir = RILL_TEST_SOURCE_DIR;
  return dir;
}

const std::string& shared_dir() {
  static const std::string dir = RILL_TEST_SHARED_DIR;
  return dir;
}

const std::string& rill_binary() {
  static const std::string path = RILL_TEST_RILL_BINARY;
  return path;
}

}  // namespace rill::testing
