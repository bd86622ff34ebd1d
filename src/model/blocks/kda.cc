#include "model/blocks/kda.h"

namespace rill::model {

void declare_kda_weights(WeightTable& t, const std::string& p, const ModelConfig& c, const ModelShard& sh,
                         KdaWeights& w) {
  // c holds this rank's heads (shard_config): the stored tensors have tp times as many, split by head.
  const int tp = sh.tp_size, r = sh.tp_rank;
  const int H = c.hidden_size, Hk = c.kda.n_heads, d = c.kda.head_dim, P = c.kda.projection_size(),
            K = c.kda.conv_kernel, Hg = Hk * tp, Pg = P * tp;
  const int qkv = t.matrix_stack({3 * P, H}, &w.qkv_proj, P);
  const int conv = t.stack({3 * P, K}, WeightRole::Vector, &w.conv_weight);
  const char* names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    t.stack_part(qkv, p + names[i] + "_proj.weight", {Pg, H}, int64_t(i) * P * H).split(0, r, tp);
    t.stack_part(conv, p + names[i] + "_conv1d.weight", {Pg, K}, int64_t(i) * P * K, {{Pg, 1, K}}).split(0, r, tp);
  }
  t.matrix(p + "f_a_proj.weight", {d, H}, &w.f_a_proj);
  t.matrix(p + "f_b_proj.weight", {Pg, d}, &w.f_b_proj).split(0, r, tp);
  // K3 stores A_log as [128] with the heads first and a zero tail (spec §2.5.1); only the heads are used.
  WeightSpec& a_log = t.vector(p + "A_log", {Hg}, &w.a_log, {{1, 1, Hg, 1}});
  a_log.zero_padded = c.family == ModelFamily::KimiK3;
  a_log.split(0, r, tp);
  t.vector(p + "dt_bias", {Pg}, &w.dt_bias, {{Hg, d}}).split(0, r, tp);
  t.matrix(p + "b_proj.weight", {Hg, H}, &w.b_proj).split(0, r, tp);
  if (c.kda.full_rank_output_gate) {
    t.matrix(p + "g_proj.weight", {Pg, H}, &w.g_proj).split(0, r, tp);
  } else {
    t.matrix(p + "g_a_proj.weight", {d, H}, &w.g_a_proj);
    t.matrix(p + "g_b_proj.weight", {Pg, d}, &w.g_b_proj).split(0, r, tp);
  }
  t.vector(p + "o_norm.weight", {d}, &w.o_norm);
  t.matrix(p + "o_proj.weight", {H, Pg}, &w.o_proj).split(1, r, tp);  // row-parallel: a partial sum per rank
}

Status kda_forward(ForwardContext& cx, const ModelConfig& c, const KdaWeights& w, TensorView u,
                   const backend::AddRmsNormArgs* u_norm, const LayerCache& cache, TensorView out) {
  WorkspaceScope scope(cx.ws);
  const int64_t T = u.size(0), Hk = c.kda.n_heads, d = c.kda.head_dim, P = c.kda.projection_size();
  const DType act = cx.act();
  auto& be = cx.be;

  // Every projection of u, the output gate's included, in one group (one launch at decode), then the two
  // low-rank second halves in another.
  TensorView qkv = cx.ws.alloc(act, {T, 3 * P});
  TensorView fa = cx.ws.alloc(act, {T, d});
  TensorView braw = cx.ws.alloc(act, {T, Hk});
  TensorView graw = cx.ws.alloc(act, {T, P});
  TensorView gate = cx.ws.alloc(act, {T, P});
  TensorView ga = c.kda.full_rank_output_gate ? TensorView{} : cx.ws.alloc(act, {T, d});
  if (c.kda.full_rank_output_gate)
    RILL_TRY(be.gemm_group({{{u, &w.qkv_proj, qkv, &cx.ws},
                             {u, &w.f_a_proj, fa, &cx.ws},
                             {u, &w.b_proj, braw, &cx.ws},
                             {u, &w.g_proj, gate, &cx.ws}},
                            u_norm}));
  else
    RILL_TRY(be.gemm_group({{{u, &w.qkv_proj, qkv, &cx.ws},
                             {u, &w.f_a_proj, fa, &cx.ws},
                             {u, &w.b_proj, braw, &cx.ws},
                             {u, &w.g_a_proj, ga, &cx.ws}},
                            u_norm}));

  // A decode step (one token per sequence, so no in-step snapshot) runs the rest as one op where the backend
  // fuses it; taps need the separate ops' intermediates. The args are whole before the backend is asked (it
  // checks `out` too).
  TensorView normed = cx.ws.alloc(act, {T, P});  // the gated norm's output, o_proj's input
  if (cx.layout.max_new_tokens == 1 && cx.layout.n_tokens == cx.layout.n_seqs && !cx.taps) {
    backend::KdaDecodeArgs dec;
    dec.qkv = qkv;
    dec.fa = fa;
    dec.f_b = &w.f_b_proj;
    if (c.kda.full_rank_output_gate) {
      dec.gate = gate;
    } else {
      dec.ga = ga;
      dec.g_b = &w.g_b_proj;
    }
    dec.braw = braw;
    dec.conv_weight = w.conv_weight;
    dec.conv_state = cache.kda_conv;
    dec.a_log = w.a_log;
    dec.dt_bias = w.dt_bias;
    dec.gate_lower_bound = c.kda.gate_lower_bound;
    dec.state = cache.kda_state;
    dec.o_norm = w.o_norm;
    dec.eps = c.rms_norm_eps;
    dec.n_heads = int(Hk);
    dec.head_dim = int(d);
    dec.layout = &cx.layout;
    dec.out = normed;
    if (be.kda_fuses_decode(dec)) {
      RILL_TRY(be.kda_decode(dec));
      return be.gemm({normed, &w.o_proj, out, &cx.ws});
    }
  }
  if (c.kda.full_rank_output_gate)
    RILL_TRY(be.gemm({fa, &w.f_b_proj, graw, &cx.ws}));
  else
    RILL_TRY(be.gemm_group({{{fa, &w.f_b_proj, graw, &cx.ws}, {ga, &w.g_b_proj, gate, &cx.ws}}}));
  cx.tap("kda.qkv", qkv);
  cx.tap("kda.graw", graw);

  backend::KdaPrepareArgs prep;
  prep.qkv = qkv;
  prep.conv_weight = w.conv_weight;
  prep.conv_state = cache.kda_conv;
  prep.graw = graw;
  prep.braw = braw;
  prep.a_log = w.a_log;
  prep.dt_bias = w.dt_bias;
  prep.gate_lower_bound = c.kda.gate_lower_bound;
  prep.n_heads = int(Hk);
  prep.head_dim = int(d);
  prep.layout = &cx.layout;
  prep.q = cx.ws.alloc(act, {T, Hk, d});
  prep.k = cx.ws.alloc(act, {T, Hk, d});
  prep.v = cx.ws.alloc(act, {T, Hk, d});
  prep.g = cx.ws.alloc(DType::F32, {T, Hk, d});
  prep.beta = cx.ws.alloc(DType::F32, {T, Hk});
  prep.conv_records = cache.kda_conv_records;  // written only for the sequences the layout marks
  RILL_TRY(be.kda_prepare(prep));  // also the conv windows of the step's in-step snapshots
  cx.tap("kda.q", prep.q);
  cx.tap("kda.k", prep.k);
  cx.tap("kda.v", prep.v);
  cx.tap("kda.g", prep.g);
  cx.tap("kda.beta", prep.beta);

  TensorView o = cx.ws.alloc(act, {T, Hk, d});
  RILL_TRY(be.kda_attention(
      {prep.q, prep.k, prep.v, prep.g, prep.beta, cache.kda_state, &cx.layout, o, &cx.ws, cache.kda_records}));
  cx.tap("kda.o", o);

  RILL_TRY(be.kda_output({o, gate, w.o_norm, c.rms_norm_eps, normed}));
  cx.tap("kda.gate", gate);
  cx.tap("kda.normed", normed);
  return be.gemm({normed, &w.o_proj, out, &cx.ws});
}

}  // namespace rill::model
