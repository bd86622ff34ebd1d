#include "cache/snapshot_pool.h"

namespace rill::cache {

SnapshotPool::SnapshotPool(int n, int first_slot)
    : ids_("KDA state snapshots", n),
      first_slot_(first_slot),
      last_use_(size_t(n), 0),
      owner_(size_t(n), 0) {}

std::optional<int32_t> SnapshotPool::allocate(uint64_t owner) {
  auto id = ids_.allocate(1);
  if (!id.ok()) return std::nullopt;
  const int32_t s = (*id)[0];
  owner_[size_t(s)] = owner;
  last_use_[size_t(s)] = ++clock_;
  lru_.insert({last_use_[size_t(s)], s});
  return s;
}

std::optional<std::pair<int32_t, uint64_t>> SnapshotPool::least_recently_used() const {
  if (lru_.empty()) return std::nullopt;
  const int32_t s = lru_.begin()->second;
  return std::pair{s, owner_[size_t(s)]};
}

void SnapshotPool::touch(int32_t s) {
  if (!lru_.erase({last_use_[size_t(s)], s})) return;  // not in use
  last_use_[size_t(s)] = ++clock_;
  lru_.insert({last_use_[size_t(s)], s});
}

Status SnapshotPool::release(int32_t s) {
  RILL_TRY(ids_.release(std::span<const int32_t>(&s, 1)));
  lru_.erase({last_use_[size_t(s)], s});
  owner_[size_t(s)] = 0;
  return {};
}

}  // namespace rill::cache
