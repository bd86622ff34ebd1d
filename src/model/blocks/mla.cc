#include "model/blocks/mla.h"

#include <cmath>

namespace rill::model {

void declare_mla_weights(WeightTable& t, const std::string& p, const ModelConfig& c, const ModelShard& sh,
                         MlaWeights& w) {
  // c holds this rank's heads; q, kv_b and the gate are split by head, q_a and kv_a (so the latent cache) are
  // replicated.
  const MlaConfig& m = c.mla;
  const int tp = sh.tp_size, r = sh.tp_rank;
  const int H = c.hidden_size, qk = m.qk_head_dim(), n = m.n_heads * tp;
  if (m.q_lora_rank > 0) {
    t.matrix(p + "q_a_proj.weight", {m.q_lora_rank, H}, &w.q_a_proj);
    t.vector(p + "q_a_layernorm.weight", {m.q_lora_rank}, &w.q_a_norm);
    t.matrix(p + "q_b_proj.weight", {n * qk, m.q_lora_rank}, &w.q_b_proj).split(0, r, tp);
  } else {
    t.matrix(p + "q_proj.weight", {n * qk, H}, &w.q_proj).split(0, r, tp);
  }
  t.matrix(p + "kv_a_proj_with_mqa.weight", {m.cache_width(), H}, &w.kv_a_proj);
  t.vector(p + "kv_a_layernorm.weight", {m.kv_lora_rank}, &w.kv_a_norm);
  t.matrix(p + "kv_b_proj.weight", {n * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank}, &w.kv_b_proj)
      .split(0, r, tp);
  if (m.output_gate) t.matrix(p + "g_proj.weight", {n * m.v_head_dim, H}, &w.g_proj).split(0, r, tp);
  t.matrix(p + "o_proj.weight", {H, n * m.v_head_dim}, &w.o_proj).split(1, r, tp);  // row-parallel
}

Status mla_forward(ForwardContext& cx, const ModelConfig& c, const MlaWeights& w, TensorView u,
                   const backend::AddRmsNormArgs* u_norm, const LayerCache& cache, TensorView out) {
  WorkspaceScope scope(cx.ws);
  const MlaConfig& m = c.mla;
  const int64_t T = u.size(0), qk = m.qk_head_dim();
  const DType act = cx.act();
  auto& be = cx.be;

  // Every projection of u in one group (one launch at decode): q (or its low-rank first half), the latent
  // and, with an output gate, the gate.
  TensorView q = cx.ws.alloc(act, {T, m.n_heads * qk});
  TensorView ckv = cx.ws.alloc(act, {T, m.cache_width()});
  TensorView gate = m.output_gate ? cx.ws.alloc(act, {T, m.n_heads * m.v_head_dim}) : TensorView{};
  TensorView qa = m.q_lora_rank > 0 ? cx.ws.alloc(act, {T, m.q_lora_rank}) : TensorView{};
  backend::GemmGroupArgs proj{
      {{u, m.q_lora_rank > 0 ? &w.q_a_proj : &w.q_proj, m.q_lora_rank > 0 ? qa : q, &cx.ws},
       {u, &w.kv_a_proj, ckv, &cx.ws}},
      u_norm};
  if (m.output_gate) proj.parts.push_back({u, &w.g_proj, gate, &cx.ws});
  RILL_TRY(be.gemm_group(proj));
  if (m.q_lora_rank > 0) {
    RILL_TRY(be.rms_norm({qa, w.q_a_norm, m.latent_norm_eps, qa}));
    RILL_TRY(be.gemm({qa, &w.q_b_proj, q, &cx.ws}));
  }
  cx.tap("mla.q", q);
  cx.tap("mla.ckv", ckv);
  RILL_TRY(be.mla_cache_write({ckv, w.kv_a_norm, m.latent_norm_eps, cache.mla_kv, &cx.layout}));

  backend::MlaAttentionArgs att;
  att.q = q.reshape({T, m.n_heads, qk});
  att.cache = cache.mla_kv;
  att.kv_b = &w.kv_b_proj;
  att.n_heads = m.n_heads;
  att.nope = m.qk_nope_head_dim;
  att.rope = m.qk_rope_head_dim;
  att.v_dim = m.v_head_dim;
  att.kv_lora = m.kv_lora_rank;
  att.scale = 1.0f / std::sqrt(float(qk));  // no mscale, no temperature (spec §3.4)
  att.layout = &cx.layout;
  att.out = cx.ws.alloc(act, {T, m.n_heads * m.v_head_dim});
  att.scratch = &cx.ws;
  RILL_TRY(be.mla_attention(att));
  cx.tap("mla.attn", att.out);
  if (m.output_gate) RILL_TRY(be.sigmoid_gate({att.out, gate}));
  return be.gemm({att.out, &w.o_proj, out, &cx.ws});
}

}  // namespace rill::model
