// Rank table and tiktoken's rank-based byte-pair merge. A token's rank is its id and its merge priority.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rill::text {

class BpeRanks {
 public:
  BpeRanks() = default;
  // tokens[r] = the bytes of rank r; all distinct (checked by the loader).
  explicit BpeRanks(const std::vector<std::string>& tokens);

  int32_t n_ranks() const { return static_cast<int32_t>(offsets_.empty() ? 0 : offsets_.size() - 1); }
  // The rank of these bytes, or -1.
  int32_t rank_of(std::string_view bytes) const;
  std::string_view token(int32_t rank) const {
    return std::string_view(bytes_).substr(offsets_[rank], offsets_[rank + 1] - offsets_[rank]);
  }

  // Appends the ids of one pre-token: the whole piece when it is a token, else repeated merging of the
  // adjacent pair whose concatenation has the lowest rank (the leftmost on ties), as tiktoken does.
  // Precondition: every single byte is a token.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  // The two merge strategies behind encode_piece (quadratic scan for short pieces, a heap for long ones);
  // public so tests can check they agree.
  void merge_scan(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_heap(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  struct Slot {
    uint32_t fingerprint;
    int32_t rank;  // -1: empty
  };
  // Rank of the token tokens[a] + tokens[b], or -1. Inside a piece every part is a token, so the rank of
  // two adjacent parts' bytes is this pair lookup on their ids (integer hash, no byte compare).
  int32_t pair_rank(int32_t a, int32_t b) const;

  struct PairSlot {
    uint64_t key;  // (a << 32) | b; ~0: empty
    int32_t rank;
  };
  std::vector<PairSlot> pairs_;
  int32_t byte_rank_[256] = {};
  uint64_t pair_mask_ = 0;

  std::string bytes_;              // all tokens back to back, in rank order
  std::vector<uint32_t> offsets_;  // n_ranks + 1
  std::vector<Slot> slots_;        // open addressing, linear probing
  uint64_t mask_ = 0;
};

// 64-bit hash of a short byte string (tokens are <= a few hundred bytes).
uint64_t hash_bytes(std::string_view bytes);

}  // namespace rill::text
