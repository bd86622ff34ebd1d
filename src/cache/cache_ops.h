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

// Speculative decoding's rollback by replay records (kda_rollback "records"): after a verify step that wrote
// records for the sequence in state slot `slot`, fold its first `n_tokens` records (the committed tokens)
// into the slot's KDA state and conv window in every KDA layer (Backend::kda_fold).
struct KdaFold {
  int32_t slot = 0;
  int32_t n_tokens = 0;
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

// A host tier item that leaves the host tier for the disk tier (issue #38): its bytes are copied out of
// host block or snapshot `host` when the ops are applied — after the tier copies issued before it, before any
// later one reuses that host id — and written to a file in the background. Blocks carry what a restarted
// server needs to put them back in its prefix index: their chain hash, their parent's and their tokens.
struct DiskWrite {
  bool snapshot = false;  // a KDA snapshot at the block with chain hash `hash`; else the MLA block itself
  int32_t host = 0;
  uint64_t hash = 0, parent_hash = 0;  // parent_hash 0: the first block of a prompt
  std::vector<int32_t> tokens;         // blocks only
  uint32_t after = 0;                  // how many tier_copies were issued before it
};

// A file of the disk tier as its start-up scan found it (header only, checked; payloads are checked when
// read): what the cache manager indexes so a restarted server's lookups find it.
struct DiskRecord {
  bool snapshot = false;
  uint64_t hash = 0, parent_hash = 0;
  std::vector<int32_t> tokens;  // blocks only
};

// A disk tier item to read into host block or snapshot `host` before a request's admission
// (CacheManager::stage_from_disk; the engine has the runner read it, then calls finish_disk_loads).
struct DiskLoad {
  bool snapshot = false;
  uint64_t hash = 0;
  int32_t host = 0;
  uint64_t entry = 0;  // the PrefixIndex entry it belongs to
};

struct CacheOps {
  // Applied before everything below: the scheduler queues a fold right after the step that wrote its records,
  // before anything else touches that sequence's slot, and nothing queued before it in the same batch reads
  // or writes that slot (slots are the sequence's own while it holds them).
  std::vector<KdaFold> kda_folds;
  // In the order the cache manager issued them; applied before the step they travel with, so a copy issued
  // after step N (a snapshot of its state) runs before step N + 1 changes the slot.
  std::vector<KdaSlotCopy> kda_slot_copies;
  std::vector<TierCopy> tier_copies;  // in order, interleaved with the slot copies by `after`
  std::vector<DiskWrite> disk_writes;  // in order, interleaved with the tier copies by `after`
  // The disk writes wait for room in the disk tier's queue instead of being dropped (persisting at shutdown).
  bool disk_writes_wait = false;
  bool empty() const {
    return kda_folds.empty() && kda_slot_copies.empty() && tier_copies.empty() && disk_writes.empty();
  }
};

}  // namespace rill::cache
