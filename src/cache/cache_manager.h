// CacheManager: the bookkeeping of a model's caches (MLA latent blocks, KDA state slots, KDA snapshots) and
// the verbs the scheduler uses on them (style.md §7.3): find_prefix / can_admit / admit / blocks_to_grow /
// grow / commit / release. Planning (`find_*`, `can_*`, `*_to_*`, `next_snapshot_at`) never mutates; admit,
// grow, commit and release do. It holds no device memory: the copies its verbs imply (snapshot restores and
// saves) queue up as CacheOps (`take_ops`) that the runner applies with the next step (design.md §2).
//
// Prefix caching (opt-in, `PrefixCacheOptions`): every full block a sequence computes goes into a PrefixIndex
// (hash chain over exact token ids, ref-counted), and the KDA state is snapshotted at block-aligned
// positions: every `snapshot_interval` tokens, and at the last block boundary a sequence reached (a finished
// request's turn, so the next turn of a conversation resumes there). A new sequence takes the longest cached
// chain that has a snapshot at its end, restores the snapshot into its slot and computes only the rest.
// Blocks it shares are full, so nobody writes them again. Unreferenced blocks and snapshots stay until memory
// runs short.
//
// Host tier (issue #38, `MemoryPlan::n_host_blocks` / `n_host_snapshots`, vLLM's --kv-offloading-size): a
// block evicted from the device, and a snapshot evicted with it or from the full snapshot pool, move to the
// host tier instead of being forgotten (TierCopy ops); a prefix hit may then take blocks and its snapshot from
// there, brought back at admission into fresh device blocks and the sequence's slot. Which host items go when
// the host tier is full is README.md's policy.
//
// Disk tier (issue #38, `MemoryPlan::disk_tier`, below the host tier): a host block or snapshot pushed out of
// the full host tier is written to disk (DiskWrite ops; the runner's disk tier writes them in the background)
// and its entry stays in the index, on disk only. `find_prefix` stops at the first entry on disk only;
// `stage_from_disk` (the engine calls it for a waiting request before scheduling) takes host ids for the disk
// part of a longer hit and holds its chain; the engine has the runner read the files into them and reports
// back (`finish_disk_loads`): what was read is a host hit for the admission that follows, what failed leaves
// the index (with every entry after it).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cache/cache_ops.h"
#include "cache/id_pool.h"
#include "cache/prefix_index.h"
#include "cache/snapshot_pool.h"
#include "model/config.h"
#include "model/step_batch.h"

namespace rill::cache {

// What the caches hold for one sequence.
struct SequenceCache {
  int32_t slot = -1;
  std::vector<int32_t> blocks;  // covers positions [0, blocks.size() * block_size)
  // Prefix caching: the index entries of blocks [0, shared.size()), held by this sequence (a prefix hit, then
  // the blocks it filled itself); blocks past them are its own.
  std::vector<PrefixIndex::EntryId> shared;
  bool unpublishable = false;  // a hash collision stopped its chain: its later blocks stay private
  // The snapshot this sequence took at its last block boundary off the interval; dropped when it takes a
  // later one.
  PrefixIndex::EntryId tail_entry = 0;
  int32_t tail_snapshot = -1;
  // Speculative decoding: the position whose state the slot's checkpoint holds (save_checkpoint), or -1.
  int32_t checkpoint_pos = -1;
};

struct PrefixCacheOptions {
  bool enabled = false;
  int snapshot_interval = 256;  // tokens between KDA snapshots while prefilling; a multiple of block_size
  int64_t snapshot_budget_bytes = 2048ll << 20;  // device memory for snapshots
  // State slots that receive the snapshots a prefill step takes inside itself (the backend's
  // kda_snapshots_in_step()); committed into the snapshot pool after the step. 0: chunks end at every
  // snapshot position instead (one step per snapshot, which costs a full weight sweep of the model each).
  int staging_slots = 0;
  PrefixIndex::HashFn block_hash = nullptr;  // tests only: a weak hash that collides (nullptr: the real one)
};

// A cached prefix a sequence can resume from: a chain of blocks ending where a KDA snapshot was taken.
struct PrefixHit {
  std::vector<PrefixIndex::EntryId> entries;
  std::vector<int32_t> blocks;  // -1 for an entry in the host tier only
  int32_t snapshot = -1;        // a device snapshot, or -1
  int32_t host_snapshot = -1;   // else the host tier snapshot restored into the slot
  int n_idle = 0;  // blocks of the hit no running sequence holds (they stop counting as evictable once taken)
  int n_host = 0;  // entries brought back from the host tier (each needs a fresh device block)
  int n_disk = 0;  // of those, entries whose host block was read from the disk tier for it
  int n_tokens(int block_size) const { return int(entries.size()) * block_size; }
};

// How speculative decoding rolls the KDA state back after a draft is rejected (--speculative-config
// "kda_rollback"): Checkpoint copies each sequence's slot to a checkpoint slot before a verify step and back on a
// rejection, then re-feeds the committed tokens; Records has the verify step write replay records instead and
// folds the committed tokens' records in afterwards (no copy, no re-feed; backend.h KdaFoldArgs).
enum class KdaRollback : uint8_t { Checkpoint, Records };

struct MemoryPlan {
  int n_slots = 0, n_blocks = 0, block_size = 64, n_snapshots = 0, n_staging = 0;
  // Speculative decoding: one checkpoint state slot per sequence slot (0 or n_slots), or with kda_rollback
  // "records" instead replay records of `record_tokens` (k + 1) tokens per sequence slot (n_record_slots 0 or
  // n_slots; record_bytes over every KDA layer).
  int n_checkpoints = 0;
  int n_record_slots = 0, record_tokens = 0;
  int64_t state_bytes = 0, kv_bytes = 0, snapshot_bytes = 0, checkpoint_bytes = 0, record_bytes = 0;
  // Host tier (prefix caching only): MLA blocks and KDA snapshots in host memory, and the bytes of one of each
  // (every layer).
  int n_host_blocks = 0, n_host_snapshots = 0;
  int64_t host_block_bytes = 0, host_snapshot_bytes = 0;
  bool pinned_host = false;  // the host tier's memory is page-locked (asynchronous copies)
  bool disk_tier = false;    // a disk tier below the host tier (the runner opened one)
  std::string describe() const;
};

class CacheManager {
 public:
  static Result<CacheManager> create(const MemoryPlan& plan, const PrefixCacheOptions& prefix = {});

  int block_size() const { return block_size_; }
  // State slots the runner's storage must hold: the sequences', then the snapshots', then the staging slots,
  // then the speculation checkpoints.
  static int state_slots_needed(const MemoryPlan& plan, const PrefixCacheOptions& prefix);
  // The device copies the verbs since the last call imply, in order (the runner applies them before the next
  // step runs).
  CacheOps take_ops();
  int blocks_for(int n_tokens) const { return (n_tokens + block_size() - 1) / block_size(); }
  bool prefix_caching() const { return prefix_.enabled; }

  // The deepest cached prefix of `tokens` with a snapshot, leaving at least the last token to compute (its
  // logits are needed). Empty without prefix caching. Valid until the next mutating call.
  PrefixHit find_prefix(std::span<const int32_t> tokens) const;
  // Where a chunk that starts at `n_computed` of `n_tokens` must stop so that a snapshot position is reached:
  // the next multiple of the interval, or the last block boundary of the prompt or of all tokens (n_tokens if
  // none comes first, or without prefix caching).
  int next_snapshot_at(int n_computed, int n_prompt, int n_tokens) const;
  // In-step snapshots: whether a prefill chunk may run past snapshot positions, taking them inside the step
  // into staging slots (staging_slot(0 .. n_staging() - 1)); and the snapshot positions strictly inside a
  // chunk [from, from + n) that are 64-token chunk boundaries of it.
  bool in_step_snapshots() const { return prefix_.enabled && n_staging_ > 0; }
  int n_staging() const { return n_staging_; }
  int32_t staging_slot(int k) const { return first_staging_ + k; }
  std::vector<int32_t> snapshot_positions_inside(int from, int n, int n_prompt) const;
  // Where a prefill chunk that starts at `from` of a sequence's `n_tokens` (the first `n_prompt` its prompt)
  // ends within `budget` tokens, so that every snapshot position is still reached: with in-step snapshots
  // only on a 64-token chunk boundary unless it reaches the end (every later snapshot position is then one),
  // else at the next snapshot position. Without prefix caching: as far as the budget goes.
  int chunk_end(int from, int budget, int n_prompt, int n_tokens) const;
  // The in-step snapshots of a chunk [from, from + n), into the step's staging slots from `*staging_used` on
  // (advanced); where they run out, fewer snapshots this step: still exact, fewer hits.
  std::vector<model::KdaSnapshotRequest> plan_snapshots(int from, int n, int n_prompt, int* staging_used) const;

  bool can_admit(int first_step_tokens) const { return can_admit(PrefixHit{}, first_step_tokens); }
  bool can_admit(const PrefixHit& hit, int first_step_tokens) const;
  // Takes a slot, the hit's blocks (restoring its snapshot into the slot) and fresh blocks up to
  // `first_step_tokens` positions.
  Status admit(SequenceCache* seq, int first_step_tokens) {
    return admit(seq, PrefixHit{}, first_step_tokens);
  }
  Status admit(SequenceCache* seq, const PrefixHit& hit, int first_step_tokens);
  // Blocks `seq` still needs to hold `total_tokens` positions.
  int blocks_to_grow(const SequenceCache& seq, int total_tokens) const;
  Status grow(SequenceCache* seq, int total_tokens);
  // After a step computed `tokens[0, n_computed)`: indexes the blocks that became full and takes the
  // snapshots due at `n_computed` (slot copies queued in the CacheOps) from the sequence's
  // slot, or from `state_slot` when the step saved the state at n_computed there (in-step snapshots). No-op
  // without prefix caching.
  Status commit(SequenceCache* seq, std::span<const int32_t> tokens, int n_prompt, int n_computed,
                int32_t state_slot = -1);
  // Gives back everything `seq` holds and empties it. An id the pools refuse (released twice) is a bug:
  // Internal error, the rest is still given back.
  Status release(SequenceCache* seq);
  // Evicts every cached block and snapshot no running sequence holds (vLLM's reset_prefix_cache).
  Status evict_all();
  // Host tier: moves every cached block no running sequence holds to the host tier, as memory pressure would
  // (benchmarks and tests: a returning request then comes back from the host). No-op without a host tier.
  Status offload_all();

  // Disk tier.
  bool disk_tier() const { return host_tier() && disk_; }
  // Indexes the files a disk tier found at start (blocks continuing a chain whose first blocks are there too,
  // and snapshots at those blocks); returns how many were indexed.
  int index_disk(const std::vector<DiskRecord>& records);
  // For a request about to be admitted: when its longest hit over every tier is longer than find_prefix's
  // and reaches into the disk tier, host ids for the items to read (the chain held until
  // finish_disk_loads); else none. Items it pushes out of the host tier queue their DiskWrites first, so the
  // caller applies take_ops() before reading into those ids.
  Result<std::vector<DiskLoad>> stage_from_disk(std::span<const int32_t> tokens);
  // `ok[i]`: whether loads[i] was read and checked. Read items become host tier items; a failed one is
  // forgotten on disk, and a block that is now nowhere takes every entry after it out of the index.
  Status finish_disk_loads(const std::vector<DiskLoad>& loads, const std::vector<bool>& ok);
  // Moves everything no running sequence holds to disk (shutdown: a restarted server finds it): device
  // items through the host tier, then every host item (written unless on disk already, then out of the host
  // tier). The caller applies take_ops() next.
  Status persist_all();

  // Speculative decoding: how a verify step is rolled back — checkpoint + re-feed (every sequence slot has its
  // own checkpoint slot) or replay records (every sequence slot has records of record_tokens() tokens).
  bool can_roll_back() const { return has_checkpoints() || has_records(); }
  bool has_records() const { return n_record_slots_ > 0; }
  int record_tokens() const { return record_tokens_; }
  // After a verify step that wrote replay records for `seq`: folds the first `n_tokens` (its committed tokens)
  // into its slot (a KdaFold, applied before the next step), and gives back blocks past the `n_blocks_tokens`
  // positions its tokens now cover (the MLA cache past the committed tokens is written again before it is
  // read, so only its length changes).
  Status fold_records(SequenceCache* seq, int n_tokens, int n_blocks_tokens);
  bool has_checkpoints() const { return n_checkpoints_ > 0; }
  int32_t checkpoint_slot(int32_t slot) const { return first_checkpoint_ + slot; }
  // Before a step that feeds drafts after position `pos` (= the sequence's computed tokens): copies the
  // slot's KDA state and conv windows into its checkpoint, unless the checkpoint holds position `pos` already
  // (a rollback restored the slot from it).
  Status save_checkpoint(SequenceCache* seq, int pos);
  // After a step whose drafts were not all accepted: the slot gets back the checkpoint's state (position
  // seq->checkpoint_pos, where the sequence's computed tokens now end), and blocks past the `n_tokens`
  // committed positions go back to the pool.
  Status roll_back(SequenceCache* seq, int n_tokens);
  // Gives back the blocks of `seq` past the first blocks_for(n_tokens) (never a block it shares).
  Status truncate(SequenceCache* seq, int n_tokens);

  // Blocks free now or freeable by evicting unreferenced cached blocks.
  int available_blocks() const { return blocks_.free_count() + index_.n_idle(); }
  // Blocks running sequences hold (cached blocks nobody holds are not counted).
  int blocks_in_use() const { return blocks_.used_count() - index_.n_idle(); }
  const IdPool& blocks() const { return blocks_; }
  const IdPool& slots() const { return slots_; }
  const PrefixIndex& index() const { return index_; }
  const SnapshotPool& snapshots() const { return snapshots_; }
  uint64_t evicted_blocks() const { return evicted_blocks_; }
  uint64_t evicted_snapshots() const { return evicted_snapshots_; }

  // Host tier.
  bool host_tier() const { return prefix_.enabled && (host_blocks_.capacity() > 0); }
  const IdPool& host_blocks() const { return host_blocks_; }
  const IdPool& host_snapshots() const { return host_snapshots_; }
  struct TierCounters {
    uint64_t blocks_to_host = 0, blocks_to_device = 0, snapshots_to_host = 0, snapshots_to_device = 0;
    uint64_t evicted_host_blocks = 0, evicted_host_snapshots = 0;  // left the host tier for good
    uint64_t blocks_to_disk = 0, snapshots_to_disk = 0, blocks_from_disk = 0, snapshots_from_disk = 0;
    uint64_t disk_load_failures = 0;
  };
  const TierCounters& tier_counters() const { return tier_; }
  uint64_t tier_bytes_to_host() const;
  uint64_t tier_bytes_to_device() const;

 private:
  CacheManager(const MemoryPlan& plan, const PrefixCacheOptions& prefix)
      : block_size_(plan.block_size),
        prefix_(prefix),
        blocks_("MLA cache blocks", plan.n_blocks),
        slots_("KDA state slots", plan.n_slots),
        snapshots_(plan.n_snapshots, plan.n_slots),
        index_(prefix.block_hash),
        n_staging_(prefix.enabled ? plan.n_staging : 0),
        first_staging_(plan.n_slots + plan.n_snapshots),
        n_checkpoints_(plan.n_checkpoints),
        first_checkpoint_(plan.n_slots + plan.n_snapshots + n_staging_),
        n_record_slots_(plan.n_record_slots),
        record_tokens_(plan.record_tokens),
        host_blocks_("host tier blocks", prefix.enabled ? plan.n_host_blocks : 0),
        host_snapshots_("host tier snapshots", prefix.enabled ? plan.n_host_snapshots : 0),
        host_block_bytes_(plan.host_block_bytes),
        host_snapshot_bytes_(plan.host_snapshot_bytes),
        disk_(prefix.enabled && plan.n_host_blocks > 0 && plan.disk_tier) {
    index_.set_spill(disk_);
  }
  // n blocks, evicting unreferenced cached ones when too few are free.
  Result<std::vector<int32_t>> allocate_blocks(int n);
  Status evict_block();
  // Takes a snapshot of `slot` for entry `at` unless it has one (queues the copy); returns the snapshot
  // taken, or -1.
  Result<int32_t> save_snapshot(int32_t slot, PrefixIndex::EntryId at);
  Status drop_tail_snapshot(SequenceCache* seq);
  // Host tier: moves the device chain end `id` (unreferenced) to the host tier, or forgets it where it is no
  // use there (no snapshot at or after it) or no host block can be had.
  Status demote(PrefixIndex::EntryId id);
  // A host block or snapshot, making room by the policy (README.md); nullopt when nothing may go.
  // (-1: nothing may go.)
  Result<int32_t> allocate_host_block();
  Result<int32_t> allocate_host_snapshot();
  // Takes an entry out of the index for good (every tier), then its parents while they are host-only chain
  // ends without a snapshot (no use to anyone).
  Status forget(PrefixIndex::EntryId id);
  Status prune_upwards(PrefixIndex::EntryId id);
  Status give_back(const PrefixIndex::Evicted& ev);
  // Offloads the device snapshot of `id` to the host tier unless it has one there (a queued copy).
  Status offload_snapshot(PrefixIndex::EntryId id, int32_t snapshot);
  void queue_tier(TierCopy::Kind kind, int32_t device, int32_t host);
  // Disk tier: queues the write of the entry's host block / host snapshot unless it is on disk already.
  void spill_block(PrefixIndex::EntryId id);
  void spill_snapshot(PrefixIndex::EntryId id);
  // Takes `id` and every entry after it out of the index (a chain cut where `id` is nowhere now).
  Status cut_chain(PrefixIndex::EntryId id);

  int block_size_;
  PrefixCacheOptions prefix_;
  CacheOps ops_;
  MlaBlockPool blocks_;
  KdaStateSlots slots_;
  SnapshotPool snapshots_;
  PrefixIndex index_;
  int n_staging_ = 0, first_staging_ = 0;
  int n_checkpoints_ = 0, first_checkpoint_ = 0;
  int n_record_slots_ = 0, record_tokens_ = 0;
  uint64_t evicted_blocks_ = 0, evicted_snapshots_ = 0;
  IdPool host_blocks_, host_snapshots_;
  int64_t host_block_bytes_ = 0, host_snapshot_bytes_ = 0;
  bool disk_ = false;
  std::vector<PrefixIndex::EntryId> staged_;  // the chain stage_from_disk holds until finish_disk_loads
  TierCounters tier_;
};

}  // namespace rill::cache
