// Where a test finds the checkout, the shared test data (tests/shared_data.h) and the built `rill` program.
// The paths are compiled into test_paths.cc alone, not passed as -D definitions to every test file: a
// definition that holds the checkout's absolute path differs between two checkouts, so ccache could share no
// test object between them, and CI builds each clean clone at a new path (cmake/build_speed.cmake).
#pragma once

#include <string>

namespace rill::testing {

const std::string& source_dir();   // the checkout (PROJECT_SOURCE_DIR)
const std::string& shared_dir();   // RILL_SHARED_DIR: ../shared beside the checkout unless configured
const std::string& rill_binary();  // the `rill` program of this build

}  // namespace rill::testing
