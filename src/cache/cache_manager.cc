#include "cache/cache_manager.h"

#include <algorithm>
#include <unordered_map>

namespace rill::cache {

std::string MemoryPlan::describe() const {
  std::string s = fmt::format(
      "{} sequence slots ({:.1f} MiB of KDA state and conv windows), {} MLA blocks of {} "
      "tokens ({:.1f} MiB, {} tokens in all)",
      n_slots, double(state_bytes) / (1 << 20), n_blocks, block_size, double(kv_bytes) / (1 << 20),
      int64_t(n_blocks) * block_size);
  if (n_snapshots > 0)
    s += fmt::format(", {} KDA snapshots for prefix caching (+{} staging slots; {:.1f} MiB)", n_snapshots,
                     n_staging, double(snapshot_bytes) / (1 << 20));
  if (n_host_blocks > 0)
    s += fmt::format(
        "; host tier{}: {} MLA blocks ({:.1f} MiB) and {} KDA snapshots ({:.1f} MiB){}", pinned_host ? " (pinned)" : "",
        n_host_blocks, double(n_host_blocks) * double(host_block_bytes) / (1 << 20), n_host_snapshots,
        double(n_host_snapshots) * double(host_snapshot_bytes) / (1 << 20), disk_tier ? ", a disk tier below" : "");
  if (n_checkpoints > 0)
    s += fmt::format(
        ", {} KDA checkpoint slots for speculative decoding ({:.1f} MiB, {:.2f} MiB per sequence)",
        n_checkpoints, double(checkpoint_bytes) / (1 << 20),
        double(checkpoint_bytes) / n_checkpoints / (1 << 20));
  if (n_record_slots > 0)
    s += fmt::format(
        ", KDA replay records of {} tokens for speculative decoding ({:.1f} MiB, {:.2f} MiB per sequence)",
        record_tokens, double(record_bytes) / (1 << 20), double(record_bytes) / n_record_slots / (1 << 20));
  return s;
}

int CacheManager::state_slots_needed(const MemoryPlan& plan, const PrefixCacheOptions& prefix) {
  return plan.n_slots + plan.n_snapshots + (prefix.enabled ? plan.n_staging : 0) + plan.n_checkpoints;
}

Result<CacheManager> CacheManager::create(const MemoryPlan& plan, const PrefixCacheOptions& prefix) {
  if (plan.n_slots < 1 || plan.n_blocks < 1 || plan.block_size < 1)
    return invalid_argument("caches need at least one state slot and one block (got {} slots, {} blocks)",
                            plan.n_slots, plan.n_blocks);
  if (plan.n_checkpoints != 0 && plan.n_checkpoints != plan.n_slots)
    return invalid_argument("caches: {} speculation checkpoints for {} sequence slots (one each, or none)",
                            plan.n_checkpoints, plan.n_slots);
  if ((plan.n_record_slots != 0 && plan.n_record_slots != plan.n_slots) ||
      (plan.n_record_slots > 0 && (plan.record_tokens < 2 || plan.n_checkpoints > 0)))
    return invalid_argument("caches: {} replay record slots of {} tokens for {} sequence slots and {} checkpoints "
                            "(one per sequence slot, at least 2 tokens, instead of checkpoints; or none)",
                            plan.n_record_slots, plan.record_tokens, plan.n_slots, plan.n_checkpoints);
  if (plan.n_host_blocks < 0 || plan.n_host_snapshots < 0 || (plan.n_host_blocks > 0) != (plan.n_host_snapshots > 0))
    return invalid_argument("caches: a host tier needs blocks and snapshots (got {} and {})", plan.n_host_blocks,
                            plan.n_host_snapshots);
  return CacheManager(plan, prefix);
}

uint64_t CacheManager::tier_bytes_to_host() const {
  return tier_.blocks_to_host * uint64_t(host_block_bytes_) + tier_.snapshots_to_host * uint64_t(host_snapshot_bytes_);
}

uint64_t CacheManager::tier_bytes_to_device() const {
  return tier_.blocks_to_device * uint64_t(host_block_bytes_) +
         tier_.snapshots_to_device * uint64_t(host_snapshot_bytes_);
}

void CacheManager::queue_tier(TierCopy::Kind kind, int32_t device, int32_t host) {
  ops_.tier_copies.push_back({kind, device, host, uint32_t(ops_.kda_slot_copies.size())});
}

CacheOps CacheManager::take_ops() {
  CacheOps out = std::move(ops_);
  ops_ = {};
  return out;
}

PrefixHit CacheManager::find_prefix(std::span<const int32_t> tokens) const {
  PrefixHit hit;
  if (!prefix_.enabled || tokens.size() < 2) return hit;
  const int B = block_size();
  // At most up to the last token: it is always computed, since its logits sample the next one.
  std::vector<PrefixIndex::EntryId> chain = index_.match(tokens, B, (int(tokens.size()) - 1) / B);
  // Up to the first entry on disk only (stage_from_disk brings those in first).
  for (size_t i = 0; i < chain.size(); ++i)
    if (index_.entry(chain[i]).block < 0 && index_.entry(chain[i]).host_block < 0) {
      chain.resize(i);
      break;
    }
  auto has_snapshot = [&](PrefixIndex::EntryId id) {
    return index_.entry(id).snapshot >= 0 || index_.entry(id).host_snapshot >= 0;
  };
  while (!chain.empty() && !has_snapshot(chain.back())) chain.pop_back();
  if (chain.empty()) return hit;
  const PrefixIndex::Entry& last = index_.entry(chain.back());
  hit.snapshot = last.snapshot;
  if (last.snapshot < 0) hit.host_snapshot = last.host_snapshot;
  for (PrefixIndex::EntryId id : chain) {
    const PrefixIndex::Entry& e = index_.entry(id);
    hit.blocks.push_back(e.block);
    hit.n_idle += e.refs == 0 && e.block >= 0;
    hit.n_host += e.block < 0;
    hit.n_disk += e.block < 0 && e.from_disk;
  }
  hit.entries = std::move(chain);
  return hit;
}

int CacheManager::next_snapshot_at(int n_computed, int n_prompt, int n_tokens) const {
  if (!prefix_.enabled) return n_tokens;
  const int B = block_size(), I = prefix_.snapshot_interval;
  int stop = (n_computed / I + 1) * I;
  for (int last : {n_prompt / B * B, n_tokens / B * B})
    if (last > n_computed) stop = std::min(stop, last);
  return std::min(stop, n_tokens);
}

std::vector<int32_t> CacheManager::snapshot_positions_inside(int from, int n, int n_prompt) const {
  std::vector<int32_t> out;
  if (!in_step_snapshots()) return out;
  const int B = block_size(), I = prefix_.snapshot_interval, last_prompt_block = n_prompt / B * B;
  for (int p = (from / B + 1) * B; p < from + n; p += B)
    if ((p - from) % model::kKdaChunk == 0 && (p % I == 0 || p == last_prompt_block)) out.push_back(p);
  return out;
}

int CacheManager::chunk_end(int from, int budget, int n_prompt, int n_tokens) const {
  int end = std::min(n_tokens, from + budget);
  if (!prefix_.enabled) return end;
  if (!in_step_snapshots()) return std::min(end, next_snapshot_at(from, n_prompt, n_tokens));
  const int aligned = end / model::kKdaChunk * model::kKdaChunk;
  return end < n_tokens && aligned > from ? aligned : end;
}

std::vector<model::KdaSnapshotRequest> CacheManager::plan_snapshots(int from, int n, int n_prompt,
                                                                    int* staging_used) const {
  std::vector<model::KdaSnapshotRequest> out;
  for (int32_t pos : snapshot_positions_inside(from, n, n_prompt)) {
    if (*staging_used >= n_staging()) break;
    out.push_back({pos, staging_slot((*staging_used)++)});
  }
  return out;
}

bool CacheManager::can_admit(const PrefixHit& hit, int first_step_tokens) const {
  const int fresh = blocks_for(first_step_tokens) - int(hit.entries.size()) + hit.n_host;
  return slots_.free_count() >= 1 && fresh <= available_blocks() - hit.n_idle;
}

Status CacheManager::admit(SequenceCache* seq, const PrefixHit& hit, int first_step_tokens) {
  if (seq->slot >= 0) return internal_error("admit: sequence already holds slot {}", seq->slot);
  if (!can_admit(hit, first_step_tokens)) return resource_exhausted("no free state slot or cache blocks");
  RILL_ASSIGN_OR_RETURN(auto slot, slots_.allocate(1));
  index_.acquire(hit.entries);  // before allocating: held blocks are never evicted
  // A host snapshot is copied into the slot before anything the allocation below pushes out of the host tier
  // reuses its id (with a disk tier a held entry's host snapshot may go: it is on disk). Were the allocation to
  // fail, the copy lands in a slot given back unused.
  if (hit.snapshot < 0 && hit.host_snapshot >= 0) {
    if (hit.host_snapshot >= host_snapshots_.capacity()) {
      RILL_TRY(index_.release(hit.entries));
      RILL_TRY(slots_.release(slot));
      return internal_error("admit: prefix hit names host snapshot {} outside the tier of {}", hit.host_snapshot,
                            host_snapshots_.capacity());
    }
    queue_tier(TierCopy::Kind::SnapshotToDevice, slot[0], hit.host_snapshot);
  }
  // Blocks brought back from the host tier take fresh device blocks too (first).
  auto fresh = allocate_blocks(blocks_for(first_step_tokens) - int(hit.entries.size()) + hit.n_host);
  if (!fresh.ok()) {
    RILL_TRY(index_.release(hit.entries));
    RILL_TRY(slots_.release(slot));
    return fresh.status();
  }
  if (hit.snapshot >= 0) {
    // A hit naming no snapshot of the pool is a bug: give back what was taken above, so the sequence can be
    // failed cleanly.
    if (hit.snapshot >= snapshots_.capacity()) {
      RILL_TRY(blocks_.release(*fresh));
      RILL_TRY(index_.release(hit.entries));
      RILL_TRY(slots_.release(slot));
      return internal_error("admit: prefix hit names snapshot {} outside the pool of {}", hit.snapshot,
                            snapshots_.capacity());
    }
    ops_.kda_slot_copies.push_back({snapshots_.slot(hit.snapshot), slot[0]});
    snapshots_.touch(hit.snapshot);
  } else if (hit.host_snapshot >= 0) {
    tier_.snapshots_to_device++;  // queued above
  }
  seq->slot = slot[0];
  seq->blocks = hit.blocks;
  size_t next = 0;
  for (size_t i = 0; i < hit.entries.size(); ++i) {
    if (seq->blocks[i] >= 0) continue;
    // In the host tier only (held since acquire, so it stayed there): back into a fresh device block.
    const int32_t b = (*fresh)[next++];
    queue_tier(TierCopy::Kind::BlockToDevice, b, index_.entry(hit.entries[i]).host_block);
    index_.set_device_block(hit.entries[i], b);
    seq->blocks[i] = b;
    tier_.blocks_to_device++;
  }
  seq->blocks.insert(seq->blocks.end(), fresh->begin() + long(next), fresh->end());
  seq->shared = hit.entries;
  seq->unpublishable = false;
  seq->tail_entry = 0;
  seq->tail_snapshot = -1;
  seq->checkpoint_pos = -1;
  return {};
}

int CacheManager::blocks_to_grow(const SequenceCache& seq, int total_tokens) const {
  return std::max(0, blocks_for(total_tokens) - int(seq.blocks.size()));
}

Status CacheManager::grow(SequenceCache* seq, int total_tokens) {
  const int n = blocks_to_grow(*seq, total_tokens);
  if (n == 0) return {};
  RILL_ASSIGN_OR_RETURN(auto more, allocate_blocks(n));
  seq->blocks.insert(seq->blocks.end(), more.begin(), more.end());
  return {};
}

Result<std::vector<int32_t>> CacheManager::allocate_blocks(int n) {
  while (blocks_.free_count() < n && index_.n_idle() > 0) RILL_TRY(evict_block());
  return blocks_.allocate(n);
}

Status CacheManager::evict_block() {
  if (host_tier()) {
    const PrefixIndex::EntryId id = index_.device_lru_end();
    if (!id) return internal_error("prefix cache: {} idle blocks but none at a chain end", index_.n_idle());
    return demote(id);
  }
  const auto ev = index_.evict_one();
  if (!ev) return internal_error("prefix cache: {} idle blocks but none at a chain end", index_.n_idle());
  RILL_TRY(blocks_.release(std::span<const int32_t>(&ev->block, 1)));
  evicted_blocks_++;
  if (ev->snapshot >= 0) {
    RILL_TRY(snapshots_.release(ev->snapshot));
    evicted_snapshots_++;
  }
  return {};
}

Result<int32_t> CacheManager::save_snapshot(int32_t slot, PrefixIndex::EntryId at) {
  if (index_.entry(at).snapshot >= 0 || snapshots_.capacity() == 0) return -1;
  std::optional<int32_t> s = snapshots_.allocate(at);
  if (!s) {
    // Full: the least recently used snapshot goes (no running sequence needs one after its admission).
    const auto [victim, owner] = *snapshots_.least_recently_used();
    if (host_tier()) RILL_TRY(offload_snapshot(owner, victim));  // before the slot is written again
    index_.set_snapshot(owner, -1);
    RILL_TRY(snapshots_.release(victim));
    evicted_snapshots_++;
    s = snapshots_.allocate(at);
  }
  ops_.kda_slot_copies.push_back({slot, snapshots_.slot(*s)});
  index_.set_snapshot(at, *s);
  return *s;
}

Status CacheManager::drop_tail_snapshot(SequenceCache* seq) {
  // Only if it is still the one this sequence took (it may have been evicted, and the id reused since).
  if (seq->tail_snapshot >= 0 && index_.entry(seq->tail_entry).snapshot == seq->tail_snapshot) {
    index_.set_snapshot(seq->tail_entry, -1);
    RILL_TRY(snapshots_.release(seq->tail_snapshot));
  }
  seq->tail_entry = 0;
  seq->tail_snapshot = -1;
  return {};
}

Status CacheManager::commit(SequenceCache* seq, std::span<const int32_t> tokens, int n_prompt, int n_computed,
                            int32_t state_slot) {
  if (!prefix_.enabled || seq->slot < 0) return {};
  const int B = block_size();
  const int n_full = std::min(n_computed, int(tokens.size())) / B;
  while (!seq->unpublishable && int(seq->shared.size()) < n_full) {
    const size_t i = seq->shared.size();
    const PrefixIndex::EntryId parent = i ? seq->shared.back() : 0;
    const auto block_tokens = tokens.subspan(i * size_t(B), size_t(B));
    if (PrefixIndex::EntryId id = index_.find(parent, block_tokens)) {
      // Another sequence cached the same block first: share theirs and give ours back. Both are full, so
      // neither is written again; later tokens read theirs (equal up to rounding if chunked differently).
      // One in the host tier only takes ours as its device block (its parent is ours, on the device).
      index_.acquire(std::span(&id, 1));
      if (index_.entry(id).block < 0) {
        index_.set_device_block(id, seq->blocks[i]);
      } else {
        RILL_TRY(blocks_.release(std::span<const int32_t>(&seq->blocks[i], 1)));
        seq->blocks[i] = index_.entry(id).block;
      }
      seq->shared.push_back(id);
    } else if (PrefixIndex::EntryId added = index_.insert(parent, block_tokens, seq->blocks[i])) {
      seq->shared.push_back(added);
    } else {
      seq->unpublishable = true;
    }
  }
  // Snapshots at block boundaries whose chain is indexed (elsewhere one could never be found).
  if (n_computed == 0 || n_computed % B != 0 || int(seq->shared.size()) < n_computed / B) return {};
  const PrefixIndex::EntryId at = seq->shared[size_t(n_computed / B - 1)];
  if (at == seq->tail_entry) return {};
  // Interval positions and the prompt's last block boundary are kept; any other boundary is this sequence's
  // tail, kept only until it reaches the next one, so a finished request leaves its last full block.
  const bool keep = n_computed % prefix_.snapshot_interval == 0 || n_computed == n_prompt / B * B;
  RILL_TRY(drop_tail_snapshot(seq));
  RILL_ASSIGN_OR_RETURN(const int32_t s, save_snapshot(state_slot >= 0 ? state_slot : seq->slot, at));
  if (s >= 0 && !keep) {
    seq->tail_entry = at;
    seq->tail_snapshot = s;
  }
  return {};
}

// Each part (index holds, own blocks, slot) is given back on its own and the sequence is emptied even when
// one part is refused (a double release): the first error is returned, and nothing stays listed that a second
// release could free again once another sequence holds those ids.
Status CacheManager::release(SequenceCache* seq) {
  const size_t n_shared = std::min(seq->shared.size(), seq->blocks.size());
  Status st = index_.release(seq->shared);
  if (seq->blocks.size() > n_shared) {
    Status blocks = blocks_.release(std::span<const int32_t>(seq->blocks).subspan(n_shared));
    if (st.ok()) st = std::move(blocks);
  }
  if (seq->slot >= 0) {
    Status slot = slots_.release(std::span<const int32_t>(&seq->slot, 1));
    if (st.ok()) st = std::move(slot);
  }
  seq->blocks.clear();
  seq->shared.clear();
  seq->slot = -1;
  seq->tail_entry = 0;
  seq->tail_snapshot = -1;  // a finished sequence's last snapshot stays cached for its next turn
  seq->checkpoint_pos = -1;
  return st;
}

Status CacheManager::save_checkpoint(SequenceCache* seq, int pos) {
  if (!has_checkpoints())
    return internal_error("save_checkpoint: the caches were planned without checkpoints");
  if (seq->slot < 0) return internal_error("save_checkpoint: the sequence holds no slot");
  if (seq->checkpoint_pos == pos) return {};
  ops_.kda_slot_copies.push_back({seq->slot, checkpoint_slot(seq->slot)});
  seq->checkpoint_pos = pos;
  return {};
}

Status CacheManager::roll_back(SequenceCache* seq, int n_tokens) {
  if (seq->slot < 0 || seq->checkpoint_pos < 0)
    return internal_error("roll_back: the sequence holds no slot or no checkpoint");
  ops_.kda_slot_copies.push_back({checkpoint_slot(seq->slot), seq->slot});
  return truncate(seq, n_tokens);
}

Status CacheManager::fold_records(SequenceCache* seq, int n_tokens, int n_blocks_tokens) {
  if (!has_records()) return internal_error("fold_records: the caches were planned without replay records");
  if (seq->slot < 0 || seq->slot >= n_record_slots_ || n_tokens < 1 || n_tokens > record_tokens_)
    return internal_error("fold_records: {} tokens into slot {} ({} record slots of {} tokens)", n_tokens, seq->slot,
                          n_record_slots_, record_tokens_);
  ops_.kda_folds.push_back({seq->slot, n_tokens});
  return truncate(seq, n_blocks_tokens);
}

Status CacheManager::truncate(SequenceCache* seq, int n_tokens) {
  const size_t keep = size_t(std::max(blocks_for(n_tokens), 0));
  if (keep >= seq->blocks.size()) return {};
  if (keep < seq->shared.size())
    return internal_error("truncate: {} blocks would drop shared blocks ({} shared)", keep,
                          seq->shared.size());
  RILL_TRY(blocks_.release(std::span<const int32_t>(seq->blocks).subspan(keep)));
  seq->blocks.resize(keep);
  return {};
}

Status CacheManager::evict_all() {
  if (!host_tier()) {
    while (index_.n_idle() > 0) RILL_TRY(evict_block());
    return {};
  }
  // Every tier: chain ends first, until only what running sequences hold is left.
  for (std::vector<PrefixIndex::EntryId> ends = index_.idle_chain_ends(); !ends.empty();
       ends = index_.idle_chain_ends())
    for (PrefixIndex::EntryId id : ends) RILL_TRY(give_back(index_.erase(id)));
  return {};
}

Status CacheManager::offload_all() {
  if (!host_tier()) return {};
  while (const PrefixIndex::EntryId id = index_.device_lru_end()) RILL_TRY(demote(id));
  return {};
}

// --- host tier ---------------------------------------------------------------------------------------------

Status CacheManager::give_back(const PrefixIndex::Evicted& ev) {
  if (ev.block >= 0) {
    RILL_TRY(blocks_.release(std::span<const int32_t>(&ev.block, 1)));
    evicted_blocks_++;
  }
  if (ev.snapshot >= 0) {
    RILL_TRY(snapshots_.release(ev.snapshot));
    evicted_snapshots_++;
  }
  if (ev.host_block >= 0) {
    RILL_TRY(host_blocks_.release(std::span<const int32_t>(&ev.host_block, 1)));
    tier_.evicted_host_blocks++;
  }
  if (ev.host_snapshot >= 0) {
    RILL_TRY(host_snapshots_.release(std::span<const int32_t>(&ev.host_snapshot, 1)));
    tier_.evicted_host_snapshots++;
  }
  return {};
}

Status CacheManager::forget(PrefixIndex::EntryId id) {
  const PrefixIndex::EntryId parent = index_.entry(id).parent;
  RILL_TRY(give_back(index_.erase(id)));
  return prune_upwards(parent);
}

// A host-only chain end without a snapshot can never serve a hit (a hit ends at a snapshot): it goes, and
// then its parent may be one.
Status CacheManager::prune_upwards(PrefixIndex::EntryId id) {
  while (id) {
    const PrefixIndex::Entry& e = index_.entry(id);
    if (e.block >= 0 || e.refs > 0 || e.n_children > 0 || e.host_snapshot >= 0 || e.disk_snapshot) return {};
    const PrefixIndex::EntryId parent = e.parent;
    RILL_TRY(give_back(index_.erase(id)));
    id = parent;
  }
  return {};
}

Result<int32_t> CacheManager::allocate_host_block() {
  while (host_blocks_.free_count() == 0) {
    const PrefixIndex::EntryId id = index_.host_lru_block();
    if (!id) return -1;
    const PrefixIndex::Entry& e = index_.entry(id);
    if (e.block >= 0) {  // a copy of a block still on the device: only the copy goes
      const int32_t h = e.host_block;
      index_.set_host_block(id, -1);
      RILL_TRY(host_blocks_.release(std::span<const int32_t>(&h, 1)));
      tier_.evicted_host_blocks++;
    } else if (disk_) {  // host only: to disk, and the entry stays there
      spill_block(id);
      const int32_t h = e.host_block;
      index_.set_host_block(id, -1);
      RILL_TRY(host_blocks_.release(std::span<const int32_t>(&h, 1)));
      tier_.evicted_host_blocks++;
    } else {  // a host-only chain end: with its snapshot
      RILL_TRY(forget(id));
    }
  }
  RILL_ASSIGN_OR_RETURN(auto h, host_blocks_.allocate(1));
  return h[0];
}

Result<int32_t> CacheManager::allocate_host_snapshot() {
  while (host_snapshots_.free_count() == 0) {
    const PrefixIndex::EntryId id = index_.host_lru_snapshot();
    if (!id) return -1;
    const int32_t h = index_.entry(id).host_snapshot;
    if (disk_) spill_snapshot(id);
    index_.set_host_snapshot(id, -1);
    RILL_TRY(host_snapshots_.release(std::span<const int32_t>(&h, 1)));
    tier_.evicted_host_snapshots++;
    RILL_TRY(prune_upwards(id));  // blocks past the chain's last snapshot are of no use now
  }
  RILL_ASSIGN_OR_RETURN(auto h, host_snapshots_.allocate(1));
  return h[0];
}

Status CacheManager::offload_snapshot(PrefixIndex::EntryId id, int32_t snapshot) {
  if (index_.entry(id).host_snapshot >= 0) return {};
  RILL_ASSIGN_OR_RETURN(const int32_t h, allocate_host_snapshot());
  if (h < 0) return {};
  queue_tier(TierCopy::Kind::SnapshotToHost, snapshots_.slot(snapshot), h);
  index_.set_host_snapshot(id, h);
  tier_.snapshots_to_host++;
  return {};
}

Status CacheManager::demote(PrefixIndex::EntryId id) {
  // Worth a host block: a snapshot here, or host entries continuing the chain (each chain of them ends in
  // one, prune_upwards sees to that).
  const PrefixIndex::Entry& e = index_.entry(id);
  bool keep = e.n_children > 0 || e.snapshot >= 0 || e.host_snapshot >= 0 || e.disk_snapshot;
  if (keep && e.host_block < 0) {
    RILL_ASSIGN_OR_RETURN(const int32_t h, allocate_host_block());
    if (h >= 0) {
      queue_tier(TierCopy::Kind::BlockToHost, e.block, h);
      index_.set_host_block(id, h);
      tier_.blocks_to_host++;
    } else {
      keep = e.disk_block;  // no host block for it: it stays only where a file holds it
    }
  }
  if (keep && e.snapshot >= 0) RILL_TRY(offload_snapshot(id, e.snapshot));
  const int32_t block = e.block, snapshot = e.snapshot;
  index_.drop_device(id);
  RILL_TRY(blocks_.release(std::span<const int32_t>(&block, 1)));
  evicted_blocks_++;
  if (snapshot >= 0) {
    RILL_TRY(snapshots_.release(snapshot));
    evicted_snapshots_++;
  }
  if (keep) return prune_upwards(id);
  // No host block for it: it and the host entries continuing its chain (unreachable without it) go.
  for (PrefixIndex::EntryId d : index_.descendants(id)) RILL_TRY(give_back(index_.erase(d)));
  return forget(id);
}

}  // namespace rill::cache

namespace rill::cache {

// --- disk tier ---------------------------------------------------------------------------------------------

void CacheManager::spill_block(PrefixIndex::EntryId id) {
  const PrefixIndex::Entry& e = index_.entry(id);
  if (!disk_ || e.disk_block || e.host_block < 0) return;
  const uint64_t parent_hash = e.parent ? index_.entry(e.parent).hash : 0;
  ops_.disk_writes.push_back({false, e.host_block, e.hash, parent_hash, e.tokens, uint32_t(ops_.tier_copies.size())});
  index_.set_disk_block(id, true);
  tier_.blocks_to_disk++;
}

void CacheManager::spill_snapshot(PrefixIndex::EntryId id) {
  const PrefixIndex::Entry& e = index_.entry(id);
  if (!disk_ || e.disk_snapshot || e.host_snapshot < 0) return;
  ops_.disk_writes.push_back({true, e.host_snapshot, e.hash, 0, {}, uint32_t(ops_.tier_copies.size())});
  index_.set_disk_snapshot(id, true);
  tier_.snapshots_to_disk++;
}

int CacheManager::index_disk(const std::vector<DiskRecord>& records) {
  if (!disk_) return 0;
  // Blocks parents first: a block enters once the block it continues is in the index.
  std::unordered_map<uint64_t, std::vector<const DiskRecord*>> by_parent;
  for (const DiskRecord& r : records)
    if (!r.snapshot && int(r.tokens.size()) == block_size_) by_parent[r.parent_hash].push_back(&r);
  int n = 0;
  std::vector<std::pair<uint64_t, PrefixIndex::EntryId>> todo = {{0, 0}};  // (hash, entry) whose children go next
  while (!todo.empty()) {
    const auto [hash, parent] = todo.back();
    todo.pop_back();
    const auto it = by_parent.find(hash);
    if (it == by_parent.end()) continue;
    for (const DiskRecord* r : it->second) {
      const PrefixIndex::EntryId id = index_.insert_cached(parent, r->tokens, r->hash);
      if (!id) continue;
      index_.set_disk_block(id, true);
      ++n;
      todo.emplace_back(r->hash, id);
    }
  }
  for (const DiskRecord& r : records)
    if (r.snapshot)
      if (const PrefixIndex::EntryId id = index_.find_hash(r.hash)) {
        index_.set_disk_snapshot(id, true);
        ++n;
      }
  return n;
}

Result<std::vector<DiskLoad>> CacheManager::stage_from_disk(std::span<const int32_t> tokens) {
  std::vector<DiskLoad> loads;
  if (!disk_tier() || tokens.size() < 2 || !staged_.empty()) return loads;
  const int B = block_size();
  std::vector<PrefixIndex::EntryId> chain = index_.match(tokens, B, (int(tokens.size()) - 1) / B);
  for (size_t i = 0; i < chain.size(); ++i) {
    const PrefixIndex::Entry& e = index_.entry(chain[i]);
    if (e.block < 0 && e.host_block < 0 && !e.disk_block) {
      chain.resize(i);
      break;
    }
  }
  auto any_snapshot = [&](PrefixIndex::EntryId id) {
    const PrefixIndex::Entry& e = index_.entry(id);
    return e.snapshot >= 0 || e.host_snapshot >= 0 || e.disk_snapshot;
  };
  while (!chain.empty() && !any_snapshot(chain.back())) chain.pop_back();
  if (chain.size() <= find_prefix(tokens).entries.size()) return loads;  // the disk adds nothing
  index_.acquire(chain);  // nothing of it leaves the index or the host tier while it is read
  staged_ = chain;
  auto give_up = [&](Status st) -> Status {
    for (const DiskLoad& l : loads)
      RILL_TRY((l.snapshot ? host_snapshots_ : host_blocks_).release(std::span<const int32_t>(&l.host, 1)));
    loads.clear();
    RILL_TRY(index_.release(staged_));
    staged_.clear();
    return st;
  };
  for (PrefixIndex::EntryId id : chain) {
    const PrefixIndex::Entry& e = index_.entry(id);
    if (e.block >= 0 || e.host_block >= 0) continue;
    Result<int32_t> h = allocate_host_block();
    if (!h.ok()) return give_up(h.status());
    if (*h < 0) {  // nothing may leave the host tier: no disk hit this time
      RILL_TRY(give_up({}));
      return loads;
    }
    loads.push_back({false, e.hash, *h, id});
  }
  const PrefixIndex::Entry& last = index_.entry(chain.back());
  if (last.snapshot < 0 && last.host_snapshot < 0) {
    Result<int32_t> h = allocate_host_snapshot();
    if (!h.ok()) return give_up(h.status());
    if (*h < 0) {
      RILL_TRY(give_up({}));
      return loads;
    }
    loads.push_back({true, last.hash, *h, chain.back()});
  }
  return loads;
}

Status CacheManager::finish_disk_loads(const std::vector<DiskLoad>& loads, const std::vector<bool>& ok) {
  if (ok.size() != loads.size())
    return internal_error("finish_disk_loads: {} results for {} loads", ok.size(), loads.size());
  std::vector<PrefixIndex::EntryId> cut, lost_snapshot;
  for (size_t i = 0; i < loads.size(); ++i) {
    const DiskLoad& l = loads[i];
    if (ok[i]) {
      if (l.snapshot) {
        index_.set_host_snapshot(l.entry, l.host);
        tier_.snapshots_from_disk++;
      } else {
        index_.set_host_block(l.entry, l.host);
        index_.set_from_disk(l.entry, true);
        tier_.blocks_from_disk++;
      }
      continue;
    }
    tier_.disk_load_failures++;
    RILL_TRY((l.snapshot ? host_snapshots_ : host_blocks_).release(std::span<const int32_t>(&l.host, 1)));
    if (l.snapshot) {
      index_.set_disk_snapshot(l.entry, false);
      lost_snapshot.push_back(l.entry);
    } else {
      index_.set_disk_block(l.entry, false);
      cut.push_back(l.entry);
    }
  }
  RILL_TRY(index_.release(staged_));
  staged_.clear();
  // The first block that failed cuts the chain: it and everything after it go (later ones are among those).
  if (!cut.empty()) RILL_TRY(cut_chain(cut.front()));
  // Blocks past the chain's last snapshot left are of no use now (as when a host snapshot is evicted).
  for (PrefixIndex::EntryId id : lost_snapshot)
    if (index_.contains(id)) RILL_TRY(prune_upwards(id));
  return {};
}

Status CacheManager::cut_chain(PrefixIndex::EntryId id) {
  for (PrefixIndex::EntryId d : index_.descendants(id)) RILL_TRY(give_back(index_.erase(d)));
  return forget(id);
}

Status CacheManager::persist_all() {
  if (!disk_tier()) return {};
  RILL_TRY(offload_all());
  for (PrefixIndex::EntryId id : index_.all_entries()) {
    const PrefixIndex::Entry& e = index_.entry(id);
    if (e.refs > 0) continue;
    spill_block(id);
    spill_snapshot(id);
    // Out of the host tier too (the writes read them before anything reuses the ids: the caller applies
    // these ops next), so the next hit on them reads the disk.
    if (const int32_t h = e.host_block; h >= 0 && e.block < 0 && e.disk_block) {
      index_.set_host_block(id, -1);
      RILL_TRY(host_blocks_.release(std::span<const int32_t>(&h, 1)));
    }
    if (const int32_t h = e.host_snapshot; h >= 0 && e.disk_snapshot) {
      index_.set_host_snapshot(id, -1);
      RILL_TRY(host_snapshots_.release(std::span<const int32_t>(&h, 1)));
    }
  }
  return {};
}

}  // namespace rill::cache
