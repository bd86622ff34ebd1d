#include "cache/cache_manager.h"

#include <algorithm>

namespace rill::cache {

std::string MemoryPlan::describe() const {
  return fmt::format("{} sequence slots ({:.1f} MiB of KDA state and conv windows), {} MLA blocks of {} tokens "
                     "({:.1f} MiB, {} tokens in all)", n_slots, double(state_bytes) / (1 << 20), n_blocks,
                     block_size, double(kv_bytes) / (1 << 20), int64_t(n_blocks) * block_size);
}

Result<MemoryPlan> plan_memory(backend::Backend& be, const model::ModelConfig& c, int n_slots, int max_model_len,
                               double kv_fraction, int n_blocks, int block_size) {
  if (n_slots < 1) return invalid_argument("--max-batch-size must be at least 1");
  if (block_size < 1) return invalid_argument("block size must be positive");
  MemoryPlan p;
  p.n_slots = n_slots;
  p.block_size = block_size;
  const DType act = be.act_dtype();
  const int64_t state = model::ModelCaches::bytes_needed(c, act, n_slots, 1, block_size) -
                        model::ModelCaches::bytes_needed(c, act, 0, 1, block_size);
  const int64_t per_block = model::ModelCaches::bytes_needed(c, act, 0, 2, block_size) -
                            model::ModelCaches::bytes_needed(c, act, 0, 1, block_size);
  p.state_bytes = state;
  if (n_blocks > 0) {
    p.n_blocks = n_blocks;
  } else if (auto mem = be.device_memory()) {
    if (kv_fraction <= 0 || kv_fraction > 1) return invalid_argument("--kv-cache-fraction must be in (0, 1]");
    const double budget = double(mem->first) * kv_fraction - double(state);
    if (budget < double(per_block))
      return resource_exhausted("no device memory left for the KV cache: {:.2f} GiB free x {} leaves less than the "
                                "{:.2f} GiB of KDA state for {} sequences; lower --max-batch-size",
                                double(mem->first) / (1 << 30), kv_fraction, double(state) / (1 << 30), n_slots);
    p.n_blocks = int(std::min<double>(budget / double(per_block), 1 << 30));
  } else {
    // Host memory (CPU backend): every slot can hold 2048 tokens at once, and one sequence the whole context;
    // more is served by preemption rather than reserved up front.
    const int per_seq = (std::min(max_model_len, 2048) + block_size - 1) / block_size;
    p.n_blocks = std::max(n_slots * per_seq, (max_model_len + block_size - 1) / block_size);
  }
  p.n_blocks = std::max(p.n_blocks, 1);
  p.kv_bytes = per_block * p.n_blocks;
  return p;
}

Result<CacheManager> CacheManager::create(backend::Backend& be, const model::ModelConfig& c, const MemoryPlan& plan) {
  RILL_ASSIGN_OR_RETURN(model::ModelCaches caches,
                        model::ModelCaches::allocate(be, c, plan.n_slots, plan.n_blocks, plan.block_size));
  return CacheManager(std::move(caches), plan.n_slots, plan.n_blocks);
}

bool CacheManager::can_admit(int first_step_tokens) const {
  return slots_.free_count() >= 1 && blocks_.free_count() >= blocks_for(first_step_tokens);
}

Status CacheManager::admit(SequenceCache* seq, int first_step_tokens) {
  if (seq->slot >= 0) return internal_error("admit: sequence already holds slot {}", seq->slot);
  if (!can_admit(first_step_tokens)) return resource_exhausted("no free state slot or cache blocks");
  RILL_ASSIGN_OR_RETURN(auto slot, slots_.allocate(1));
  auto blocks = blocks_.allocate(blocks_for(first_step_tokens));
  if (!blocks.ok()) {
    RILL_TRY(slots_.release(slot));
    return blocks.status();
  }
  seq->slot = slot[0];
  seq->blocks = std::move(blocks).value();
  return {};
}

int CacheManager::blocks_to_grow(const SequenceCache& seq, int total_tokens) const {
  return std::max(0, blocks_for(total_tokens) - int(seq.blocks.size()));
}

Status CacheManager::grow(SequenceCache* seq, int total_tokens) {
  const int n = blocks_to_grow(*seq, total_tokens);
  if (n == 0) return {};
  RILL_ASSIGN_OR_RETURN(auto more, blocks_.allocate(n));
  seq->blocks.insert(seq->blocks.end(), more.begin(), more.end());
  return {};
}

Status CacheManager::release(SequenceCache* seq) {
  if (!seq->blocks.empty()) RILL_TRY(blocks_.release(seq->blocks));
  if (seq->slot >= 0) RILL_TRY(slots_.release(std::span<const int32_t>(&seq->slot, 1)));
  seq->blocks.clear();
  seq->slot = -1;
  return {};
}

}  // namespace rill::cache
