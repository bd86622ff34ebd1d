#include "text/tokenizer/bpe_ranks.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <queue>

namespace rill::text {
namespace {

constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();
// Below this length the quadratic scan beats the heap (tiktoken switches at 100 bytes as well).
constexpr size_t kHeapThreshold = 128;

inline uint64_t mix(uint64_t h) {
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return h;
}

}  // namespace

uint64_t hash_bytes(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  uint64_t h = 0x9E3779B97F4A7C15ull * (n + 1);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * 0x94D049BB133111EBull;
  }
  return mix(h);
}

namespace {
inline uint64_t pair_hash(uint64_t key) {
  return mix(key * 0x9E3779B97F4A7C15ull);
}
constexpr uint64_t kEmptyPair = ~uint64_t{0};
}  // namespace

BpeRanks::BpeRanks(const std::vector<std::string>& tokens) {
  offsets_.reserve(tokens.size() + 1);
  offsets_.push_back(0);
  for (const std::string& t : tokens) {
    bytes_ += t;
    offsets_.push_back(static_cast<uint32_t>(bytes_.size()));
  }
  size_t capacity = 16;
  while (capacity < tokens.size() * 3) capacity *= 2;  // load factor <= 1/3 keeps probes short
  slots_.assign(capacity, Slot{0, -1});
  mask_ = capacity - 1;
  for (size_t r = 0; r < tokens.size(); ++r) {
    const uint64_t h = hash_bytes(tokens[r]);
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].rank < 0) {
        slots_[i] = {static_cast<uint32_t>(h >> 32), static_cast<int32_t>(r)};
        break;
      }
    }
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    byte_rank_[b] = rank_of(std::string_view(&c, 1));
  }
  // Every split of every token into two tokens (Kimi: ~300k pairs).
  std::vector<std::pair<uint64_t, int32_t>> found;
  for (size_t r = 0; r < tokens.size(); ++r) {
    const std::string_view t = tokens[r];
    for (size_t cut = 1; cut < t.size(); ++cut) {
      const int32_t a = rank_of(t.substr(0, cut));
      if (a < 0) continue;
      const int32_t b = rank_of(t.substr(cut));
      if (b >= 0) found.emplace_back((uint64_t(uint32_t(a)) << 32) | uint32_t(b), static_cast<int32_t>(r));
    }
  }
  size_t pair_capacity = 16;
  while (pair_capacity < found.size() * 2) pair_capacity *= 2;
  pairs_.assign(pair_capacity, PairSlot{kEmptyPair, -1});
  pair_mask_ = pair_capacity - 1;
  for (const auto& [key, rank] : found) {
    for (uint64_t i = pair_hash(key) & pair_mask_;; i = (i + 1) & pair_mask_) {
      if (pairs_[i].key == kEmptyPair) {
        pairs_[i] = {key, rank};
        break;
      }
    }
  }
}

int32_t BpeRanks::pair_rank(int32_t a, int32_t b) const {
  const uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  for (uint64_t i = pair_hash(key) & pair_mask_;; i = (i + 1) & pair_mask_) {
    const PairSlot& s = pairs_[i];
    if (s.key == key) return s.rank;
    if (s.key == kEmptyPair) return -1;
  }
}

int32_t BpeRanks::rank_of(std::string_view bytes) const {
  if (slots_.empty()) return -1;
  const uint64_t h = hash_bytes(bytes);
  const auto fp = static_cast<uint32_t>(h >> 32);
  for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.rank < 0) return -1;
    if (s.fingerprint == fp) {
      const uint32_t begin = offsets_[s.rank], len = offsets_[s.rank + 1] - begin;
      if (len == bytes.size() && std::memcmp(bytes_.data() + begin, bytes.data(), len) == 0) return s.rank;
    }
  }
}

void BpeRanks::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  const int32_t whole = rank_of(piece);
  if (whole >= 0) {
    out.push_back(whole);
  } else if (piece.size() < kHeapThreshold) {
    merge_scan(piece, out);
  } else {
    merge_heap(piece, out);
  }
}

// tiktoken's byte_pair_merge, on ids: parts[i] = (id of part i, rank of merging part i with part i+1).
// Ranks are ids, so a merged part's id is the rank that merged it.
void BpeRanks::merge_scan(std::string_view piece, std::vector<int32_t>& out) const {
  struct Part {
    int32_t id;
    uint32_t rank;
  };
  const size_t n = piece.size();
  Part stack_parts[kHeapThreshold];
  std::vector<Part> heap_parts;
  Part* parts = stack_parts;
  if (n > kHeapThreshold) {
    heap_parts.resize(n);
    parts = heap_parts.data();
  }
  auto rank_of_pair = [&](int32_t a, int32_t b) {
    const int32_t r = pair_rank(a, b);
    return r < 0 ? kNoRank : static_cast<uint32_t>(r);
  };
  for (size_t i = 0; i < n; ++i) parts[i].id = byte_rank_[static_cast<unsigned char>(piece[i])];
  for (size_t i = 0; i + 1 < n; ++i) parts[i].rank = rank_of_pair(parts[i].id, parts[i + 1].id);
  parts[n - 1].rank = kNoRank;
  size_t n_parts = n;
  while (n_parts > 1) {
    uint32_t best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < n_parts; ++i) {
      if (parts[i].rank < best) {
        best = parts[i].rank;
        at = i;
      }
    }
    if (best == kNoRank) break;
    parts[at].id = static_cast<int32_t>(best);
    std::memmove(parts + at + 1, parts + at + 2, (n_parts - at - 2) * sizeof(Part));
    --n_parts;
    if (at > 0) parts[at - 1].rank = rank_of_pair(parts[at - 1].id, parts[at].id);
    parts[at].rank = at + 1 < n_parts ? rank_of_pair(parts[at].id, parts[at + 1].id) : kNoRank;
  }
  for (size_t i = 0; i < n_parts; ++i) out.push_back(parts[i].id);
}

// Same merge order with a min-heap of (rank, start): an entry is stale once either of its parts changed.
void BpeRanks::merge_heap(std::string_view piece, std::vector<int32_t>& out) const {
  const auto n = static_cast<uint32_t>(piece.size());
  std::vector<uint32_t> next(n), prev(n);
  std::vector<int32_t> id(n);
  std::vector<char> alive(n, 1);
  for (uint32_t i = 0; i < n; ++i) {
    next[i] = i + 1;  // n: none
    prev[i] = i == 0 ? n : i - 1;
    id[i] = byte_rank_[static_cast<unsigned char>(piece[i])];
  }
  struct Entry {
    uint32_t rank, start, right;
    int32_t left_id, right_id;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : start > o.start; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  auto push_pair = [&](uint32_t left) {
    if (left >= n || next[left] >= n) return;
    const uint32_t right = next[left];
    const int32_t r = pair_rank(id[left], id[right]);
    if (r >= 0) heap.push({static_cast<uint32_t>(r), left, right, id[left], id[right]});
  };
  for (uint32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Entry e = heap.top();
    heap.pop();
    if (!alive[e.start] || next[e.start] != e.right || id[e.start] != e.left_id || id[e.right] != e.right_id)
      continue;
    alive[e.right] = 0;
    id[e.start] = static_cast<int32_t>(e.rank);
    next[e.start] = next[e.right];
    if (next[e.right] < n) prev[next[e.right]] = e.start;
    if (prev[e.start] < n) push_pair(prev[e.start]);
    push_pair(e.start);
  }
  for (uint32_t i = 0; i < n; i = next[i]) out.push_back(id[i]);
}

}  // namespace rill::text
