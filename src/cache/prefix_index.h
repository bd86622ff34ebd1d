// PrefixIndex: the full MLA blocks kept for reuse (nano-vllm's hash chain, design.md §4). A block is keyed by
// hash(parent block's hash, its 64 token ids); each entry stores its token ids and its parent entry, and a
// lookup compares both, so a match is the exact token prefix, never just an equal hash. Entries are
// ref-counted by the running sequences that hold them; unreferenced ones stay cached and are evicted least
// recently used first, from the end of a chain (a block whose chain continues in the index is not evicted).
// Host bookkeeping only: the MLA block ids and KDA snapshot ids it records belong to the CacheManager's
// pools.
//
// Host tier (issue #38): an entry may also (or only) live in the host tier — `host_block`, `host_snapshot` —
// with `block` -1 once its device block went. Device residency is closed under parents (a chain is evicted
// from the device tail first and brought back head first), so a device chain end is an entry with no device
// children; the index as a whole is closed under parents too (entries leave only as chain ends).
//
// Disk tier (issue #38): `disk_block` / `disk_snapshot` say a file holds the entry's block or snapshot. With a
// disk tier below the host tier (`set_spill`), any unreferenced host block may leave the host (it goes to
// disk), not only a host-only chain end, and so may the host snapshot of a held entry (a running sequence
// restored it at its admission; a conversation's own snapshot would otherwise pin a small tier).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace rill::cache {

class PrefixIndex {
 public:
  using EntryId = uint64_t;  // never reused; 0 is "no entry" (the parent of a chain's first block)

  struct Entry {
    uint64_t hash = 0;
    EntryId parent = 0;
    std::vector<int32_t> tokens;  // the block's token ids (block_size of them)
    int32_t block = -1;           // the MLA cache block holding their latent KV; -1: host tier only
    int32_t refs = 0;             // running sequences holding it
    int32_t n_children = 0;       // cached blocks whose chain continues from this one
    int32_t n_device_children = 0;  // those of them with a device block
    int32_t snapshot = -1;        // KDA snapshot of the state right after this block, or -1
    int32_t host_block = -1;      // host tier copy of the block, or -1
    int32_t host_snapshot = -1;   // host tier copy of a snapshot at this block, or -1
    bool disk_block = false, disk_snapshot = false;  // in the disk tier
    bool from_disk = false;  // its host block was read from the disk tier (and has not been on the device since)
    uint64_t last_use = 0;
  };

  // What an eviction gives back to the pools.
  struct Evicted {
    int32_t block = -1;
    int32_t snapshot = -1;
    int32_t host_block = -1;
    int32_t host_snapshot = -1;
  };

  // Hash of a block's tokens continuing a chain whose last block hashed to `parent_hash` (0 for the first).
  static uint64_t chain_hash(uint64_t parent_hash, std::span<const int32_t> tokens);
  using HashFn = uint64_t (*)(uint64_t parent_hash, std::span<const int32_t> tokens);
  // Tests pass a weak `hash` to force collisions; lookups must stay exact regardless.
  explicit PrefixIndex(HashFn hash = nullptr) : hash_(hash ? hash : &chain_hash) {}

  // The entry continuing `parent` with exactly `tokens`, or 0.
  EntryId find(EntryId parent, std::span<const int32_t> tokens) const;
  // The longest cached chain equal to the first blocks of `tokens`, at most `max_blocks` long.
  std::vector<EntryId> match(std::span<const int32_t> tokens, int block_size, int max_blocks) const;
  const Entry& entry(EntryId id) const { return entries_.at(id); }
  bool contains(EntryId id) const { return entries_.count(id) > 0; }

  // Adds `block`, full with `tokens` after the chain ending at `parent`, held once by the caller. Returns 0
  // (nothing added) when another block of other tokens already has this hash: a 64-bit collision, so the
  // block just stays private.
  EntryId insert(EntryId parent, std::span<const int32_t> tokens, int32_t block);
  // Adds a block known only from the disk tier (a restart): no device or host block, nobody holding it.
  // Returns 0 when `hash` is not what this index's hash gives those tokens after `parent` (another hash
  // function wrote it) or another block already has it.
  EntryId insert_cached(EntryId parent, std::span<const int32_t> tokens, uint64_t hash);
  // The entry with chain hash `hash`, or 0.
  EntryId find_hash(uint64_t hash) const;
  void acquire(std::span<const EntryId> ids);
  // Gives back one hold of each id; one not held that often (a double release) is a bug: Internal error,
  // nothing released.
  Status release(std::span<const EntryId> ids);
  void set_snapshot(EntryId id, int32_t snapshot);

  // Removes the least recently used unreferenced block that ends its chain; nullopt when none is left.
  std::optional<Evicted> evict_one();

  // Host tier. The least recently used unreferenced entry with a device block and no device children (whose
  // device block may go), or 0.
  EntryId device_lru_end() const;
  // Its device block and snapshot are gone (the caller gave them back); it stays as a host tier entry.
  void drop_device(EntryId id);
  // Brought back (or computed again) into device block `block`; its parent must have a device block.
  void set_device_block(EntryId id, int32_t block);
  void set_host_block(EntryId id, int32_t host_block);
  void set_host_snapshot(EntryId id, int32_t host_snapshot);
  void set_disk_block(EntryId id, bool on_disk) { at(id).disk_block = on_disk; }
  void set_disk_snapshot(EntryId id, bool on_disk) { at(id).disk_snapshot = on_disk; }
  void set_from_disk(EntryId id, bool from_disk) { at(id).from_disk = from_disk; }
  // A disk tier below the host tier: host blocks may leave from anywhere in a chain (see above).
  void set_spill(bool spill) { spill_ = spill; }
  // The least recently used host block that may go: a copy of a block still on the device, or an
  // unreferenced host-only chain end (with a disk tier: any unreferenced one); 0 when none.
  EntryId host_lru_block() const;
  // The least recently used host snapshot of an unreferenced entry (with a disk tier: of any entry), or 0.
  EntryId host_lru_snapshot() const;
  // Removes an unreferenced chain end, whatever its tiers; returns every id it held.
  Evicted erase(EntryId id);
  // Every entry (no particular order).
  std::vector<EntryId> all_entries() const;
  // Unreferenced chain ends (for evicting everything).
  std::vector<EntryId> idle_chain_ends() const;
  // The entries whose chain continues through `id`, deepest first (each a chain end once those after it go).
  std::vector<EntryId> descendants(EntryId id) const;

  int n_entries() const { return int(entries_.size()); }
  // Entries with a device block that no running sequence holds: all can be evicted (tails first), because a
  // sequence holding an entry holds its whole chain.
  int n_idle() const { return n_idle_; }

 private:
  Entry& at(EntryId id) { return entries_.at(id); }
  // Puts `id` in or out of the eviction order after its refs, children or last use changed.
  void relink(EntryId id, uint64_t old_last_use);

  HashFn hash_;
  std::unordered_map<EntryId, Entry> entries_;
  std::unordered_map<uint64_t, EntryId> by_hash_;
  std::set<std::pair<uint64_t, EntryId>> evictable_;  // (last_use, id): unreferenced device chain ends
  std::set<std::pair<uint64_t, EntryId>> host_blocks_, host_snapshots_;  // (last_use, id): may go (above)
  EntryId next_id_ = 1;
  uint64_t clock_ = 0;
  int n_idle_ = 0;
  bool spill_ = false;
};

}  // namespace rill::cache
