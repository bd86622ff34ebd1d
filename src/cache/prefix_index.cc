#include "cache/prefix_index.h"

#include <algorithm>

namespace rill::cache {
namespace {

// MurmurHash3's 64-bit finaliser: a bijection with full avalanche, so every token id moves every bit.
uint64_t fmix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

}  // namespace

uint64_t PrefixIndex::chain_hash(uint64_t parent_hash, std::span<const int32_t> tokens) {
  uint64_t h = fmix64(parent_hash ^ (0x9e3779b97f4a7c15ull * (tokens.size() + 1)));
  for (int32_t t : tokens) h = fmix64(h + 0x9e3779b97f4a7c15ull * (uint64_t(uint32_t(t)) + 1));
  return h;
}

PrefixIndex::EntryId PrefixIndex::find(EntryId parent, std::span<const int32_t> tokens) const {
  const uint64_t parent_hash = parent ? entries_.at(parent).hash : 0;
  const auto it = by_hash_.find(hash_(parent_hash, tokens));
  if (it == by_hash_.end()) return 0;
  const Entry& e = entries_.at(it->second);
  // Equal hashes are not trusted: the parent and every token id must match too.
  if (e.parent != parent || !std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end()))
    return 0;
  return it->second;
}

std::vector<PrefixIndex::EntryId> PrefixIndex::match(std::span<const int32_t> tokens, int block_size,
                                                     int max_blocks) const {
  std::vector<EntryId> chain;
  EntryId parent = 0;
  for (int b = 0; b < max_blocks && size_t(b + 1) * size_t(block_size) <= tokens.size(); ++b) {
    parent = find(parent, tokens.subspan(size_t(b) * size_t(block_size), size_t(block_size)));
    if (!parent) break;
    chain.push_back(parent);
  }
  return chain;
}

void PrefixIndex::relink(EntryId id, uint64_t old_last_use) {
  const Entry& e = entries_.at(id);
  for (auto* set : {&evictable_, &host_blocks_, &host_snapshots_}) set->erase({old_last_use, id});
  if (e.block >= 0 && e.refs == 0 && e.n_device_children == 0) evictable_.insert({e.last_use, id});
  if (e.host_block >= 0 && (e.block >= 0 || (e.refs == 0 && (spill_ || e.n_children == 0))))
    host_blocks_.insert({e.last_use, id});
  if (e.host_snapshot >= 0 && (e.refs == 0 || spill_)) host_snapshots_.insert({e.last_use, id});
}

PrefixIndex::EntryId PrefixIndex::insert(EntryId parent, std::span<const int32_t> tokens, int32_t block) {
  const uint64_t hash = hash_(parent ? entries_.at(parent).hash : 0, tokens);
  if (by_hash_.count(hash)) return 0;
  const EntryId id = next_id_++;
  Entry e;
  e.hash = hash;
  e.parent = parent;
  e.tokens.assign(tokens.begin(), tokens.end());
  e.block = block;
  e.refs = 1;
  e.last_use = ++clock_;
  entries_.emplace(id, std::move(e));
  by_hash_.emplace(hash, id);
  if (parent) {
    at(parent).n_children++;
    at(parent).n_device_children++;
    relink(parent, at(parent).last_use);
  }
  return id;
}

PrefixIndex::EntryId PrefixIndex::insert_cached(EntryId parent, std::span<const int32_t> tokens, uint64_t hash) {
  if (hash_(parent ? entries_.at(parent).hash : 0, tokens) != hash || by_hash_.count(hash)) return 0;
  const EntryId id = next_id_++;
  Entry e;
  e.hash = hash;
  e.parent = parent;
  e.tokens.assign(tokens.begin(), tokens.end());
  e.last_use = ++clock_;
  entries_.emplace(id, std::move(e));
  by_hash_.emplace(hash, id);
  if (parent) {
    at(parent).n_children++;
    relink(parent, at(parent).last_use);
  }
  return id;
}

PrefixIndex::EntryId PrefixIndex::find_hash(uint64_t hash) const {
  const auto it = by_hash_.find(hash);
  return it == by_hash_.end() ? 0 : it->second;
}

void PrefixIndex::acquire(std::span<const EntryId> ids) {
  for (EntryId id : ids) {
    Entry& e = at(id);
    if (e.refs++ == 0 && e.block >= 0) n_idle_--;
    relink(id, e.last_use);
  }
}

Status PrefixIndex::release(std::span<const EntryId> ids) {
  std::unordered_map<EntryId, int32_t> times;  // an id may appear more than once, like in acquire
  for (EntryId id : ids) {
    auto it = entries_.find(id);
    if (it == entries_.end() || ++times[id] > it->second.refs)
      return internal_error("prefix cache: entry {} released but not held", id);
  }
  const uint64_t now = ++clock_;
  for (EntryId id : ids) {
    Entry& e = at(id);
    const uint64_t old = e.last_use;
    e.last_use = now;
    if (--e.refs == 0 && e.block >= 0) n_idle_++;
    relink(id, old);
  }
  return {};
}

void PrefixIndex::set_snapshot(EntryId id, int32_t snapshot) {
  at(id).snapshot = snapshot;
}

std::optional<PrefixIndex::Evicted> PrefixIndex::evict_one() {
  const EntryId id = device_lru_end();
  if (!id || at(id).n_children > 0) return std::nullopt;
  return erase(id);
}

PrefixIndex::EntryId PrefixIndex::device_lru_end() const {
  return evictable_.empty() ? 0 : evictable_.begin()->second;
}

PrefixIndex::EntryId PrefixIndex::host_lru_block() const {
  return host_blocks_.empty() ? 0 : host_blocks_.begin()->second;
}

PrefixIndex::EntryId PrefixIndex::host_lru_snapshot() const {
  return host_snapshots_.empty() ? 0 : host_snapshots_.begin()->second;
}

void PrefixIndex::drop_device(EntryId id) {
  Entry& e = at(id);
  if (e.block < 0) return;
  e.block = -1;
  e.snapshot = -1;
  if (e.refs == 0) n_idle_--;
  relink(id, e.last_use);
  if (e.parent) {
    at(e.parent).n_device_children--;
    relink(e.parent, at(e.parent).last_use);
  }
}

void PrefixIndex::set_device_block(EntryId id, int32_t block) {
  Entry& e = at(id);
  if (e.block >= 0) return;
  e.block = block;
  e.from_disk = false;
  if (e.refs == 0) n_idle_++;
  relink(id, e.last_use);
  if (e.parent) {
    at(e.parent).n_device_children++;
    relink(e.parent, at(e.parent).last_use);
  }
}

void PrefixIndex::set_host_block(EntryId id, int32_t host_block) {
  at(id).host_block = host_block;
  if (host_block < 0) at(id).from_disk = false;
  relink(id, at(id).last_use);
}

void PrefixIndex::set_host_snapshot(EntryId id, int32_t host_snapshot) {
  at(id).host_snapshot = host_snapshot;
  relink(id, at(id).last_use);
}

PrefixIndex::Evicted PrefixIndex::erase(EntryId id) {
  const Entry& e = at(id);
  const Evicted out{e.block, e.snapshot, e.host_block, e.host_snapshot};
  for (auto* set : {&evictable_, &host_blocks_, &host_snapshots_}) set->erase({e.last_use, id});
  if (e.block >= 0 && e.refs == 0) n_idle_--;
  if (e.parent) {
    Entry& p = at(e.parent);
    p.n_children--;
    if (e.block >= 0) p.n_device_children--;
    relink(e.parent, p.last_use);
  }
  by_hash_.erase(e.hash);
  entries_.erase(id);
  return out;
}

std::vector<PrefixIndex::EntryId> PrefixIndex::all_entries() const {
  std::vector<EntryId> out;
  for (const auto& [id, e] : entries_) out.push_back(id);
  return out;
}

std::vector<PrefixIndex::EntryId> PrefixIndex::idle_chain_ends() const {
  std::vector<EntryId> out;
  for (const auto& [id, e] : entries_)
    if (e.refs == 0 && e.n_children == 0) out.push_back(id);
  return out;
}

std::vector<PrefixIndex::EntryId> PrefixIndex::descendants(EntryId id) const {
  std::vector<std::pair<int, EntryId>> found;  // (depth below id, entry)
  for (const auto& [d, e] : entries_) {
    int depth = 0;
    for (EntryId p = e.parent; p; p = entries_.at(p).parent) {
      ++depth;
      if (p == id) {
        found.emplace_back(depth, d);
        break;
      }
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<EntryId> out;
  for (const auto& [depth, d] : found) out.push_back(d);
  return out;
}

}  // namespace rill::cache
