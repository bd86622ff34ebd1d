// The CUDA backend options of a test run: `--backend-option key=value` on a test program's command line
// (test_main.cc collects them), applied by the helpers that make the tests' backends (make_test_backend). One
// program thus covers a kernel path and the path it replaced: ctest runs the GPU programs again with an
// option (rill_test_variant in CMakeLists.txt), instead of environment variables read inside backend/.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cuda_backend_options.h"

namespace rill::testing {

// The `--backend-option` values of this run, in order (test_main.cc).
const std::vector<std::string>& backend_option_args();

inline const backend::CudaBackendOptions& cuda_backend_options() {
  static const backend::CudaBackendOptions options = [] {
    auto o = backend::parse_cuda_backend_options(backend_option_args());
    if (!o.ok()) {
      std::fprintf(stderr, "%s\n", o.status().message().c_str());
      std::exit(2);
    }
    return *o;
  }();
  return options;
}

// backend::make_backend with this run's options.
inline Result<std::unique_ptr<backend::Backend>> make_test_backend(std::string_view name) {
  return backend::make_backend(name, cuda_backend_options());
}

// The same with one more "key=value" over this run's options: a test's A and B of one switch.
inline Result<std::unique_ptr<backend::Backend>> make_test_backend(std::string_view name,
                                                                   std::string_view key_value) {
  backend::CudaBackendOptions o = cuda_backend_options();
  RILL_TRY(backend::set_cuda_backend_option(o, key_value));
  return backend::make_backend(name, o);
}

}  // namespace rill::testing
