#include <cstdlib>
#include <cstring>

#include "backend/cuda/common/launch.h"

namespace rill::cuda {

bool pdl_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("RILL_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

}  // namespace rill::cuda
