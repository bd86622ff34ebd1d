// What the disk tier's files are tied to (issue #38): a 64-bit fingerprint of everything that decides the
// bytes of an MLA block or KDA snapshot — the model's config (every field of model::ModelConfig that changes
// the computation), its weights (the declared tensors' names and shapes and a sample of each one's bytes),
// the cache layout (each layer's cache tensors' dtype and row shape, the block size) and this rank's place
// (tensor / pipeline shard) — plus what the caller knows of the checkpoint (`identity`: rill serve passes
// config.json). Files written under another fingerprint are never read.
#pragma once

#include <cstdint>
#include <string_view>

#include "model/model.h"

namespace rill::runner {

Result<uint64_t> cache_fingerprint(const model::Model& model, const model::ModelCaches& caches, int block_size,
                                   std::string_view identity);

}  // namespace rill::runner
