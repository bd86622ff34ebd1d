// PrefixIndex: the full MLA blocks kept for reuse (nano-vllm's hash chain, design.md §4). A block is keyed by
// hash(parent block's hash, its 64 token ids); each entry stores its token ids and its parent entry, and a
// lookup compares both, so a match is the exact token prefix, never just an equal hash. Entries are
// ref-counted by the running sequences that hold them; unreferenced ones stay cached and are evicted least
// recently used first, from the end of a chain (a block whose chain continues in the index is not evicted).
// Host bookkeeping only: the MLA block ids and KDA snapshot ids it records belong to the CacheManager's
// pools.
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
    int32_t block = -1;           // the MLA cache block holding their latent KV
    int32_t refs = 0;             // running sequences holding it
    int32_t n_children = 0;       // cached blocks whose chain continues from this one
    int32_t snapshot = -1;        // KDA snapshot of the state right after this block, or -1
    uint64_t last_use = 0;
  };

  // What an eviction gives back to the pools.
  struct Evicted {
    int32_t block = -1;
    int32_t snapshot = -1;
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

  // Adds `block`, full with `tokens` after the chain ending at `parent`, held once by the caller. Returns 0
  // (nothing added) when another block of other tokens already has this hash: a 64-bit collision, so the
  // block just stays private.
  EntryId insert(EntryId parent, std::span<const int32_t> tokens, int32_t block);
  void acquire(std::span<const EntryId> ids);
  // Gives back one hold of each id; one not held that often (a double release) is a bug: Internal error,
  // nothing released.
  Status release(std::span<const EntryId> ids);
  void set_snapshot(EntryId id, int32_t snapshot);

  // Removes the least recently used unreferenced block that ends its chain; nullopt when none is left.
  std::optional<Evicted> evict_one();

  int n_entries() const { return int(entries_.size()); }
  // Entries no running sequence holds: all can be evicted (tails first), because a sequence holding an entry
  // holds its whole chain.
  int n_idle() const { return n_idle_; }

 private:
  Entry& at(EntryId id) { return entries_.at(id); }
  // Puts `id` in or out of the eviction order after its refs, children or last use changed.
  void relink(EntryId id, uint64_t old_last_use);

  HashFn hash_;
  std::unordered_map<EntryId, Entry> entries_;
  std::unordered_map<uint64_t, EntryId> by_hash_;
  std::set<std::pair<uint64_t, EntryId>> evictable_;  // (last_use, id): unreferenced chain ends
  EntryId next_id_ = 1;
  uint64_t clock_ = 0;
  int n_idle_ = 0;
};

}  // namespace rill::cache
