// A fresh directory under the system's temporary directory for one test, removed with everything in it
// (write permission restored first: tests make directories read-only).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace rill::testing {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "rill_test") {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace rill::testing
