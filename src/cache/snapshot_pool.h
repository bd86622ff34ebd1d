// SnapshotPool: copies of the KDA recurrent state and conv window of every KDA layer, taken at block-aligned
// positions so that a prefix hit can resume a sequence there (design.md §4). A snapshot is one extra state
// slot of model::ModelCaches (snapshot k lives in slot first_slot + k, after the sequences' slots), so saving
// and restoring are device-to-device copies on the backend stream, ordered with the steps around them. Each
// snapshot in use belongs to one PrefixIndex entry (its owner); under pressure the least recently used one
// is given up.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "cache/id_pool.h"
#include "core/status.h"

namespace rill::cache {

class SnapshotPool {
 public:
  SnapshotPool(int n, int first_slot);

  int capacity() const { return ids_.capacity(); }
  int used_count() const { return ids_.used_count(); }
  int32_t slot(int32_t snapshot) const { return first_slot_ + snapshot; }

  // A free snapshot for `owner`, or nullopt when all are in use (evict one first).
  std::optional<int32_t> allocate(uint64_t owner);
  // The least recently used snapshot in use and its owner.
  std::optional<std::pair<int32_t, uint64_t>> least_recently_used() const;
  void touch(int32_t snapshot);
  Status release(int32_t snapshot);

 private:
  IdPool ids_;
  int first_slot_;
  uint64_t clock_ = 0;
  std::vector<uint64_t> last_use_, owner_;
  std::set<std::pair<uint64_t, int32_t>> lru_;  // (last use, snapshot) of those in use
};

}  // namespace rill::cache
