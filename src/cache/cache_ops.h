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

// A move between the device caches and the host tier (issue #38): an evicted MLA block (every MLA layer's
// rows of it) or KDA snapshot (every KDA layer's state and conv window) copied to host memory, or one brought
// back for a prefix hit.
struct TierCopy {
  enum class Kind : uint8_t { BlockToHost, BlockToDevice, SnapshotToHost, SnapshotToDevice };
  Kind kind = Kind::BlockToHost;
  int32_t device = 0;  // the MLA block, or the KDA state slot
  int32_t host = 0;    // the host tier block, or host tier snapshot
  // How many kda_slot_copies were issued before it: it runs after those and before the rest (a snapshot
  // slot offloaded, then reused; a slot saved into a snapshot, then restored from the host for a new
  // sequence).
  uint32_t after = 0;
};

struct CacheOps {
  // In the order the cache manager issued them; applied before the step they travel with, so a copy issued
  // after step N (a snapshot of its state) runs before step N + 1 changes the slot.
  std::vector<KdaSlotCopy> kda_slot_copies;
  std::vector<TierCopy> tier_copies;  // in order, interleaved with the slot copies by `after`
  bool empty() const { return kda_slot_copies.empty() && tier_copies.empty(); }
};

}  // namespace rill::cache
