// HostTier: the memory of the prefix cache's host tier (issue #38, cache/README.md): MLA blocks and KDA
// snapshots evicted from the device caches, in one host allocation (page-locked on CUDA), and the copies a
// step's TierCopy ops stand for. The cache manager decides what moves; this only holds and copies.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "cache/cache_ops.h"
#include "model/model.h"

namespace rill::runner {

struct HostTier {
  backend::DeviceAllocation memory;
  int n_blocks = 0, n_snapshots = 0;
  // One block: every MLA layer's rows of it; one snapshot: every KDA layer's state and conv window.
  size_t block_bytes = 0, snapshot_bytes = 0;
  bool pinned = false;

  bool enabled() const { return n_blocks > 0 && n_snapshots > 0; }
  static size_t block_bytes_of(const model::ModelCaches& caches);
  static size_t snapshot_bytes_of(const model::ModelCaches& caches);
  // `bytes` of host memory split evenly by bytes between blocks and snapshots (cache/README.md says why).
  // A size too small for one of each, or memory that cannot be had (or pinned), is an error naming it; the
  // runner then runs without the tier.
  static Result<HostTier> create(backend::Backend& be, const model::ModelCaches& caches, int64_t bytes);

  // Host block or snapshot `id`: every layer's rows of it, contiguous (what the disk tier writes and reads);
  // nullptr outside the tier.
  char* item(bool snapshot, int32_t id) const;
  size_t item_bytes(bool snapshot) const { return snapshot ? snapshot_bytes : block_bytes; }

  // Appends the per-layer copies of `c` to `out`.
  Status append_copies(const model::ModelCaches& caches, const cache::TierCopy& c,
                       std::vector<backend::HostCopy>* out) const;
};

}  // namespace rill::runner
