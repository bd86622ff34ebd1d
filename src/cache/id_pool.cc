#include "cache/id_pool.h"

namespace rill::cache {

IdPool::IdPool(std::string what, int n) : what_(std::move(what)), capacity_(n) {
  for (int i = 0; i < n; ++i) free_.insert(free_.end(), i);
}

Result<std::vector<int32_t>> IdPool::allocate(int n) {
  if (n < 0 || n > free_count())
    return resource_exhausted("{}: {} wanted, {} of {} free", what_, n, free_count(), capacity_);
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    out.push_back(*free_.begin());
    free_.erase(free_.begin());
  }
  return out;
}

Status IdPool::release(std::span<const int32_t> ids) {
  std::set<int32_t> seen;
  for (int32_t id : ids)
    if (id < 0 || id >= capacity_ || free_.count(id) || !seen.insert(id).second)
      return internal_error("{}: id {} released but not allocated", what_, id);
  free_.insert(ids.begin(), ids.end());
  return {};
}

}  // namespace rill::cache
