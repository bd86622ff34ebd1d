#include "runner/host_tier.h"

#include <algorithm>

#include "core/log.h"
#include "core/sizes.h"

namespace rill::runner {
namespace {

// Bytes of one row (block or slot) of a contiguous [n, ...] cache tensor.
size_t row_bytes(const TensorView& t) { return t.nbytes() / size_t(t.size(0)); }

}  // namespace

size_t HostTier::block_bytes_of(const model::ModelCaches& caches) {
  size_t n = 0;
  for (const model::LayerCache& L : caches.layers)
    if (!L.mla_kv.empty()) n += row_bytes(L.mla_kv);
  return n;
}

size_t HostTier::snapshot_bytes_of(const model::ModelCaches& caches) {
  size_t n = 0;
  for (const model::LayerCache& L : caches.layers)
    for (const TensorView* t : {&L.kda_state, &L.kda_conv})
      if (!t->empty()) n += row_bytes(*t);
  return n;
}

Result<HostTier> HostTier::create(backend::Backend& be, const model::ModelCaches& caches, int64_t bytes) {
  HostTier h;
  h.block_bytes = block_bytes_of(caches);
  h.snapshot_bytes = snapshot_bytes_of(caches);
  if (h.block_bytes == 0 || h.snapshot_bytes == 0)
    return invalid_argument("the model has no MLA blocks or no KDA state to keep in a host tier");
  h.n_snapshots = int(std::min<int64_t>(bytes / 2 / int64_t(h.snapshot_bytes), 1 << 24));
  h.n_blocks = int(std::min<int64_t>((bytes - int64_t(h.n_snapshots) * int64_t(h.snapshot_bytes)) /
                                         int64_t(h.block_bytes),
                                     1 << 28));
  if (h.n_snapshots < 1 || h.n_blocks < 1)
    return invalid_argument("{} holds no KDA snapshot ({}) and MLA block ({}) at half each",
                            format_bytes(double(bytes)), format_bytes(double(h.snapshot_bytes)),
                            format_bytes(double(h.block_bytes)));
  const size_t total = size_t(h.n_blocks) * h.block_bytes + size_t(h.n_snapshots) * h.snapshot_bytes;
  RILL_ASSIGN_OR_RETURN(h.memory, be.allocate_host(total));
  h.pinned = be.host_memory_pinned();
  return h;
}

char* HostTier::item(bool snapshot, int32_t id) const {
  if (id < 0 || id >= (snapshot ? n_snapshots : n_blocks)) return nullptr;
  char* base = static_cast<char*>(memory.data());
  return snapshot ? base + size_t(n_blocks) * block_bytes + size_t(id) * snapshot_bytes
                  : base + size_t(id) * block_bytes;
}

Status HostTier::append_copies(const model::ModelCaches& caches, const cache::TierCopy& c,
                               std::vector<backend::HostCopy>* out) const {
  using Kind = cache::TierCopy::Kind;
  const bool is_block = c.kind == Kind::BlockToHost || c.kind == Kind::BlockToDevice;
  const bool to_host = c.kind == Kind::BlockToHost || c.kind == Kind::SnapshotToHost;
  const int n_host = is_block ? n_blocks : n_snapshots;
  const int n_device = is_block ? caches.n_blocks : caches.n_slots;
  if (c.host < 0 || c.host >= n_host || c.device < 0 || c.device >= n_device)
    return internal_error("host tier copy of {} {} <-> host {} outside [0, {}) x [0, {})",
                          is_block ? "block" : "state slot", c.device, c.host, n_device, n_host);
  char* host = static_cast<char*>(memory.data()) +
               (is_block ? size_t(c.host) * block_bytes
                         : size_t(n_blocks) * block_bytes + size_t(c.host) * snapshot_bytes);
  for (const model::LayerCache& L : caches.layers) {
    std::initializer_list<const TensorView*> tensors = {&L.kda_state, &L.kda_conv};
    std::initializer_list<const TensorView*> blocks = {&L.mla_kv};
    for (const TensorView* t : is_block ? blocks : tensors) {
      if (t->empty()) continue;
      const size_t n = row_bytes(*t);
      char* dev = static_cast<char*>(t->data) + size_t(c.device) * n;
      out->push_back(to_host ? backend::HostCopy{host, dev, n, true} : backend::HostCopy{dev, host, n, false});
      host += n;
    }
  }
  return {};
}

}  // namespace rill::runner
