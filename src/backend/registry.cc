// make_backend: "cpu", "cuda" or "cuda:N" by name.
#include <charconv>

#include "backend/backend.h"
#include "backend/cuda_backend_options.h"

#if RILL_HAVE_CUDA
#include "backend/cuda/make_cuda_backend.h"
#endif

namespace rill::backend {

bool cuda_backend_compiled() { return RILL_HAVE_CUDA != 0; }

Result<int> parse_cuda_device(std::string_view name) {
  if (name == "cuda") return 0;
  constexpr std::string_view prefix = "cuda:";
  if (name.starts_with(prefix)) {
    const std::string_view digits = name.substr(prefix.size());
    int index = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() && index >= 0) return index;
  }
  return invalid_argument("unknown device \"{}\" (expected cpu, cuda or cuda:N with N a device index)", name);
}

Result<std::unique_ptr<Backend>> make_backend(std::string_view name) {
  return make_backend(name, CudaBackendOptions{});
}

Result<std::unique_ptr<Backend>> make_backend(std::string_view name, const CudaBackendOptions& options) {
  if (name == "cpu") return make_cpu_backend();
  RILL_ASSIGN_OR_RETURN(const int index, parse_cuda_device(name));
#if RILL_HAVE_CUDA
  return make_cuda_backend(index, options);
#else
  (void)index;
  (void)options;
  return unavailable("this rill was built without the CUDA backend (no nvcc at build time); use --device cpu");
#endif
}

}  // namespace rill::backend
