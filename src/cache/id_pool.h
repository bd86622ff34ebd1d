// IdPool: a pool of integer ids [0, n) handed out and returned exactly once — the MLA cache blocks
// (MlaBlockPool) and the KDA state slots (KdaStateSlots). Lowest ids first, so runs are reproducible.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace rill::cache {

class IdPool {
 public:
  IdPool(std::string what, int n);
  int capacity() const { return capacity_; }
  int free_count() const { return int(free_.size()); }
  int used_count() const { return capacity_ - free_count(); }
  // All of `n` ids or none (ResourceExhausted).
  Result<std::vector<int32_t>> allocate(int n);
  // Returns ids; an id that is not out (double free, never allocated) is a bug: Internal error, nothing freed.
  Status release(std::span<const int32_t> ids);

 private:
  std::string what_;
  int capacity_;
  std::set<int32_t> free_;  // ordered: lowest ids first
};

using MlaBlockPool = IdPool;
using KdaStateSlots = IdPool;

}  // namespace rill::cache
