// CacheOps: the device work that the cache manager's bookkeeping implies, handed to the runners to apply
// (design.md §2): the cache manager hands out block and slot ids, the runners own the memory. Plain data, so the
// same operations can be broadcast to every rank.
#pragma once

#include <cstdint>
#include <vector>

namespace rill::cache {

// Copies the KDA recurrent state and conv window of every KDA layer from state slot `from` to slot `to`:
// a snapshot restored into a sequence's slot at admission, or a slot saved into a snapshot after a step.
struct KdaSlotCopy {
  int32_t from = 0, to = 0;
};

struct CacheOps {
  // In the order the cache manager issued them; applied before the step they travel with, so a copy issued
  // after step N (a snapshot of its state) runs before step N + 1 changes the slot.
  std::vector<KdaSlotCopy> kda_slot_copies;
  bool empty() const { return kda_slot_copies.empty(); }
};

}  // namespace rill::cache
