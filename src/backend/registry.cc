// make_backend: "cpu" or "cuda" by name.
#include "backend/backend.h"

#if RILL_HAVE_CUDA
#include "backend/cuda/make_cuda_backend.h"
#endif

namespace rill::backend {

bool cuda_backend_compiled() { return RILL_HAVE_CUDA != 0; }

Result<std::unique_ptr<Backend>> make_backend(std::string_view name) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "cuda") {
#if RILL_HAVE_CUDA
    return make_cuda_backend(0);
#else
    return unavailable("this rill was built without the CUDA backend (no nvcc at build time); use --device cpu");
#endif
  }
  return invalid_argument("unknown device \"{}\" (expected cpu or cuda)", name);
}

}  // namespace rill::backend
