#include "model/parallel_plan.h"

#include <algorithm>
#include <tuple>

#include "model/model.h"

namespace rill::model {
namespace {

// The decoder layer a tensor belongs to ("...layers.12.self_attn..." -> 12), -1 for the others.
int layer_of(const std::string& name) {
  const size_t at = name.find("layers.");
  if (at == std::string::npos) return -1;
  int v = -1;
  for (size_t i = at + 7; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) v = (v < 0 ? 0 : v * 10) + (name[i] - '0');
  return v;
}


}  // namespace

int64_t ParallelPlan::max_weight_bytes() const {
  int64_t m = 0;
  for (const StagePlan& s : stages) m = std::max(m, s.weight_bytes);
  return m;
}

Result<ParallelPlan> plan_parallel(const ModelConfig& c, const dist::ParallelSizes& sizes) {
  RILL_ASSIGN_OR_RETURN(dist::Mapping mapping, dist::Mapping::make(sizes, 0));
  if (sizes.dp != 1) return invalid_argument("--data-parallel-size {}: data-parallel attention is not planned", sizes.dp);
  if (sizes.pp > c.n_layers)
    return invalid_argument("--pipeline-parallel-size {} is more stages than the model's {} layers", sizes.pp,
                            c.n_layers);
  ParallelPlan plan;
  plan.sizes = sizes;
  plan.shard = ModelShard::from_mapping(mapping, nullptr);
  auto cpu = backend::make_cpu_backend();
  ModelShard all_layers = plan.shard;  // every stage's layers declared once, then counted per stage
  all_layers.pp_rank = 0;
  all_layers.pp_size = 1;
  RILL_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, build_model(c, *cpu, all_layers));
  const ModelConfig& local = m->config();
  for (int s = 0; s < sizes.pp; ++s) {
    StagePlan st;
    std::tie(st.first_layer, st.end_layer) = stage_layers(c.n_layers, s, sizes.pp);
    for (int l = st.first_layer; l < st.end_layer; ++l) (c.layer_kinds[size_t(l)] == LayerKind::Kda ? st.n_kda : st.n_mla)++;
    const int64_t Hk = local.kda.n_heads, d = local.kda.head_dim;
    st.state_bytes_per_sequence = st.n_kda * (Hk * d * d * 4 + int64_t(local.kda.conv_kernel - 1) * 3 * Hk * d * 2);
    st.kv_bytes_per_token = int64_t(st.n_mla) * local.mla.cache_width() * 2;
    plan.stages.push_back(st);
  }
  for (const WeightSpec& w : m->weight_table().specs()) {
    const int l = layer_of(w.name);
    int stage = 0;
    if (l >= 0) {
      while (stage + 1 < sizes.pp && l >= plan.stages[size_t(stage)].end_layer) ++stage;
    } else if (w.name.find("embed_tokens") == std::string::npos) {
      stage = sizes.pp - 1;  // the final norm, the output AttnRes and lm_head
    }
    // bf16 matrices on CUDA; FP8 ones 1 byte per weight plus their F32 block scales.
    plan.stages[size_t(stage)].weight_bytes += m->weight_table().loaded_bytes_of(w, 2);
  }
  return plan;
}

}  // namespace rill::model
