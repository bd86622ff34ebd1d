#include "backend/cuda/common/launch.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

namespace rill::cuda {
namespace {

std::mutex pdl_off_mu;
std::vector<cudaStream_t> pdl_off;  // streams whose backend has CudaBackendOptions::pdl off (few: tests, A/B)
std::atomic<int> n_pdl_off{0};

}  // namespace

bool pdl_enabled(cudaStream_t stream) {
  if (n_pdl_off.load(std::memory_order_relaxed) == 0) return true;
  std::lock_guard<std::mutex> lock(pdl_off_mu);
  return std::find(pdl_off.begin(), pdl_off.end(), stream) == pdl_off.end();
}

void set_stream_pdl(cudaStream_t stream, bool enabled) {
  std::lock_guard<std::mutex> lock(pdl_off_mu);
  pdl_off.erase(std::remove(pdl_off.begin(), pdl_off.end(), stream), pdl_off.end());
  if (!enabled) pdl_off.push_back(stream);
  n_pdl_off.store(int(pdl_off.size()), std::memory_order_relaxed);
}

}  // namespace rill::cuda
