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

Status copy_kda_slot(backend::Backend& be, const model::ModelCaches& caches, int from, int to) {
  if (from == to) return {};
  if (from < 0 || to < 0 || from >= caches.n_slots || to >= caches.n_slots)
    return internal_error("KDA slot copy {} -> {} outside [0, {})", from, to, caches.n_slots);
  for (const model::LayerCache& L : caches.layers) {
    for (const TensorView* t : {&L.kda_state, &L.kda_conv}) {
      if (t->empty()) continue;
      const size_t per_slot = t->nbytes() / size_t(t->size(0));  // contiguous [n_slots, ...]
      char* base = static_cast<char*>(t->data);
      RILL_TRY(
          be.copy_device_to_device(base + size_t(to) * per_slot, base + size_t(from) * per_slot, per_slot));
    }
  }
  return {};
}

}  // namespace rill::cache
