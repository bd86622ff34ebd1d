// Kimi Delta Attention on the CPU backend (src/backend/cpu/kda.cc) against an fp64 oracle written here from
// spec §3.3: kda_prepare (short causal conv over the carried window + SiLU, both forget-gate forms, beta) and
// kda_attention against the token-by-token delta rule (the CPU takes the chunked path for n_new > 1 and the
// recurrent step for one token): one-shot prefill across chunk boundaries, state carried across calls, a
// ragged batch with shuffled slots and in-step snapshots, decode steps, and the whole pipeline split over
// calls against one pass over the sequence.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/cpu_op_helpers.h"

namespace rill::testing {
namespace {

constexpr int kD = 128, kK = 4;
// fp32 op vs fp64 oracle. Conv, gates and beta are a few fp32 operations per element: ~1e-7, bounded at 1e-5
// of max(|value|, kPrepareFloor); the conv sums O(1) terms, so an output near zero keeps their absolute
// rounding (~5e-8 seen). The delta rule accumulates fp32 rounding over d = 128 products per step and over the
// chunk's forward substitution: ~1e-6 rel-L2 on these inputs, bounded at 1e-5.
constexpr double kPrepareTol = 1e-5, kPrepareFloor = 0.1;
constexpr double kAttnTol = 1e-5;

// The forget gate forms (spec §3.3 step 3), each strong (the state forgets within a few tokens) and mild (it
// carries across a chunk and across calls, so a dropped or misplaced state shows).
enum class Gate { Softplus, SoftplusMild, Bounded, BoundedMild };
constexpr Gate kGates[] = {Gate::Softplus, Gate::SoftplusMild, Gate::Bounded, Gate::BoundedMild};

const char* gate_name(Gate g) {
  switch (g) {
    case Gate::Softplus:
      return "softplus";
    case Gate::SoftplusMild:
      return "softplus-mild";
    case Gate::Bounded:
      return "bounded";
    case Gate::BoundedMild:
      return "bounded-mild";
  }
  return "?";
}

struct GateParams {
  std::vector<float> a_log, dt_bias;  // [Hk], [Hk * d]
  std::optional<float> lower_bound;   // K3: -5
};

GateParams gate_params(OpHarness& h, int heads, Gate gate) {
  GateParams p;
  const bool bounded = gate == Gate::Bounded || gate == Gate::BoundedMild;
  const bool mild = gate == Gate::SoftplusMild || gate == Gate::BoundedMild;
  const float a_lo = gate == Gate::SoftplusMild ? 0.01f : 0.5f,
              a_hi = gate == Gate::SoftplusMild ? 0.1f : 4.0f;
  for (float a : h.uniform(heads, a_lo, a_hi, false)) p.a_log.push_back(std::log(a));
  p.dt_bias = h.randn(int64_t(heads) * kD, 0.5f, false);
  // Bounded and mild: dt_bias shifted by -5 puts exp(a) (graw + b) mostly below -2, so g = -5 sigmoid(.) is
  // mostly in (-0.6, 0).
  if (bounded && mild)
    for (float& b : p.dt_bias) b -= 5.0f;
  if (bounded) p.lower_bound = -5.0f;
  return p;
}

// g for one channel from the raw projection (spec §3.3 step 3). Softplus without FLA's linear pass-through
// above 20: log1p(exp(x)) - x < 2.1e-9 there, far inside the tolerance.
double gate_reference(const GateParams& p, int head, int channel, double graw) {
  const double x = graw + p.dt_bias[size_t(head * kD + channel)], a = std::exp(double(p.a_log[size_t(head)]));
  if (p.lower_bound) return *p.lower_bound * sigmoid(a * x);
  return -a * std::log1p(std::exp(x));
}

// ---------------------------------------------------------------------------------------------- the oracle

// kda_prepare's outputs for a step: q, k, v, g [T, Hk, d], beta [T, Hk], the conv windows [slots, K-1, 3P].
struct PrepareRef {
  std::vector<double> q, k, v, g, beta, windows;
};

// Spec §3.3 steps 2-4 in double. Each sequence's history is its slot's window (zeros when it starts fresh)
// followed by its new pre-conv inputs; the new window is the last K-1 rows of that history.
PrepareRef prepare_reference(const model::StepBatch& batch, const std::vector<float>& qkv,
                             const std::vector<float>& conv_w, const std::vector<float>& windows,
                             const std::vector<float>& graw, const std::vector<float>& braw,
                             const GateParams& gp, int heads) {
  const int64_t P = int64_t(heads) * kD, C = 3 * P, T = batch.n_tokens();
  PrepareRef r;
  r.q.resize(size_t(T * P));
  r.k.resize(size_t(T * P));
  r.v.resize(size_t(T * P));
  r.g.resize(size_t(T * P));
  r.beta.resize(size_t(T * heads));
  r.windows.assign(windows.begin(), windows.end());
  int64_t t0 = 0;
  for (const model::SequenceStep& s : batch.seqs) {
    std::vector<double> hist(size_t((kK - 1 + s.n_new) * C), 0.0);
    const size_t w0 = size_t(s.state_slot) * size_t((kK - 1) * C);
    if (s.start_pos > 0)
      std::copy(windows.begin() + w0, windows.begin() + w0 + size_t((kK - 1) * C), hist.begin());
    for (int i = 0; i < s.n_new; ++i)
      for (int64_t c = 0; c < C; ++c) hist[size_t((kK - 1 + i) * C + c)] = qkv[size_t((t0 + i) * C + c)];
    for (int i = 0; i < s.n_new; ++i)
      for (int64_t c = 0; c < C; ++c) {
        double acc = 0;  // tap j reads the input K-1-j tokens back; tap K-1 the current one
        for (int j = 0; j < kK; ++j)
          acc += double(conv_w[size_t(c * kK + j)]) * hist[size_t((i + j) * C + c)];
        const double y = acc * sigmoid(acc);
        std::vector<double>& out = c < P ? r.q : c < 2 * P ? r.k : r.v;
        out[size_t((t0 + i) * P + c % P)] = y;
      }
    std::copy(hist.end() - (kK - 1) * C, hist.end(), r.windows.begin() + std::ptrdiff_t(w0));
    t0 += s.n_new;
  }
  for (int64_t t = 0; t < T; ++t)
    for (int hh = 0; hh < heads; ++hh) {
      for (int c = 0; c < kD; ++c) {
        const size_t i = size_t(t * P + hh * kD + c);
        r.g[i] = gate_reference(gp, hh, c, graw[i]);
      }
      r.beta[size_t(t * heads + hh)] = sigmoid(braw[size_t(t * heads + hh)]);
    }
  return r;
}

// One token of the gated delta rule for one head (spec §3.3 steps 5-6) in double; S is [d_k][d_v].
void delta_rule_token(double* S, const double* q, const double* k, const double* v, const double* g,
                      double beta, double* o) {
  double qq = 0, kk = 0;
  for (int c = 0; c < kD; ++c) qq += q[c] * q[c], kk += k[c] * k[c];
  std::vector<double> qh(kD), kh(kD), e(kD);
  for (int c = 0; c < kD; ++c) {
    qh[size_t(c)] = q[c] / std::sqrt(qq + 1e-6) / std::sqrt(double(kD));
    kh[size_t(c)] = k[c] / std::sqrt(kk + 1e-6);
  }
  for (int c = 0; c < kD; ++c)
    for (int j = 0; j < kD; ++j) S[c * kD + j] *= std::exp(g[c]);
  for (int j = 0; j < kD; ++j) {
    double pred = 0;
    for (int c = 0; c < kD; ++c) pred += S[c * kD + j] * kh[size_t(c)];
    e[size_t(j)] = v[j] - pred;
  }
  for (int c = 0; c < kD; ++c)
    for (int j = 0; j < kD; ++j) S[c * kD + j] += beta * kh[size_t(c)] * e[size_t(j)];
  for (int j = 0; j < kD; ++j) {
    double acc = 0;
    for (int c = 0; c < kD; ++c) acc += S[c * kD + j] * qh[size_t(c)];
    o[j] = acc;
  }
}

std::vector<double> widen(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Inputs of kda_attention for T tokens, in fp32 as the op gets them and widened for the oracle.
struct AttnInputs {
  std::vector<float> q, k, v, g, beta;  // [T, Hk, d] and [T, Hk]
};

// q, k, v ~ N(0, 1) (conv outputs, not yet normalised), g from graw ~ N(0, 1) through the gate form,
// beta = sigmoid(N(0, 1)).
AttnInputs attention_inputs(OpHarness& h, int64_t T, int heads, const GateParams& gp) {
  const int64_t P = int64_t(heads) * kD;
  AttnInputs in{h.randn(T * P, 1.0f, false), h.randn(T * P, 1.0f, false), h.randn(T * P, 1.0f, false),
                h.randn(T * P, 1.0f, false), h.randn(T * heads, 1.0f, false)};
  for (int64_t t = 0; t < T; ++t)
    for (int hh = 0; hh < heads; ++hh)
      for (int c = 0; c < kD; ++c) {
        float& g = in.g[size_t(t * P + hh * kD + c)];
        g = float(gate_reference(gp, hh, c, g));
      }
  for (float& b : in.beta) b = float(sigmoid(b));
  return in;
}

// The oracle's recurrent states, slot by slot ([Hk, d_k, d_v] each), kept next to the op's state tensor.
struct States {
  int n_slots = 0, heads = 0;
  BackendTensor op;
  std::vector<std::vector<double>> oracle;
  size_t slot_elems() const { return size_t(heads) * kD * kD; }
};

// Every slot starts with N(0, scale) garbage: carried-in state for continuing sequences, ignored by fresh
// ones.
States make_states(OpHarness& h, int n_slots, int heads, float scale) {
  States s;
  s.n_slots = n_slots;
  s.heads = heads;
  const std::vector<float> init = h.randn(int64_t(n_slots) * heads * kD * kD, scale, false);
  s.op = h.put(h.cpu(), init, DType::F32, {n_slots, heads, kD, kD});
  for (int i = 0; i < n_slots; ++i)
    s.oracle.push_back(widen(slice(init, size_t(i) * s.slot_elems(), s.slot_elems())));
  return s;
}

// Runs `seqs` through kda_attention and the oracle: checks every sequence's output, the final state of its
// slot and of each snapshot slot, and that slots no sequence names keep their bytes. The oracle states move
// on with the op's.
void check_attention_step(OpHarness& h, States& st, const std::vector<StepSeq>& seqs, const GateParams& gp) {
  const int heads = st.heads;
  const model::StepBatch batch = make_step(seqs, 64);
  const int64_t T = batch.n_tokens(), P = int64_t(heads) * kD;
  const AttnInputs in = attention_inputs(h, T, heads, gp);
  const Shape act{T, heads, kD};
  const BackendTensor q = h.put(h.cpu(), in.q, DType::F32, act), k = h.put(h.cpu(), in.k, DType::F32, act),
                      v = h.put(h.cpu(), in.v, DType::F32, act), g = h.put(h.cpu(), in.g, DType::F32, act),
                      beta = h.put(h.cpu(), in.beta, DType::F32, {T, heads});
  const BackendTensor out = h.empty(h.cpu(), DType::F32, act);
  const std::vector<float> before = h.get(h.cpu(), st.op.view);
  const backend::BatchLayout l = cpu_layout(h, batch, 64);
  const Status status =
      h.cpu().kda_attention({q.view, k.view, v.view, g.view, beta.view, st.op.view, &l, out.view, nullptr});
  ASSERT_TRUE(status.ok()) << status.message();
  const std::vector<float> got = h.get(h.cpu(), out.view), state = h.get(h.cpu(), st.op.view);

  const std::vector<double> qd = widen(in.q), kd = widen(in.k), vd = widen(in.v), gd = widen(in.g);
  std::vector<double> want(size_t(T * P));
  std::vector<char> used(size_t(st.n_slots), 0);
  int64_t t0 = 0;
  for (const StepSeq& s : seqs) {
    SCOPED_TRACE(::testing::Message()
                 << "sequence at slot " << s.slot << " (start " << s.start_pos << ", " << s.n_new << " new)");
    std::vector<double> S =
        s.start_pos == 0 ? std::vector<double>(st.slot_elems(), 0.0) : st.oracle[size_t(s.slot)];
    size_t next_snap = 0;
    for (int i = 0; i < s.n_new; ++i) {
      const size_t t = size_t(t0 + i);
      for (int hh = 0; hh < heads; ++hh) {
        const size_t x = t * size_t(P) + size_t(hh * kD);
        delta_rule_token(&S[size_t(hh) * kD * kD], &qd[x], &kd[x], &vd[x], &gd[x],
                         in.beta[t * size_t(heads) + size_t(hh)], &want[x]);
      }
      if (next_snap < s.snapshots.size() && s.snapshots[next_snap].pos == s.start_pos + i + 1) {
        const int slot = s.snapshots[next_snap++].slot;
        st.oracle[size_t(slot)] = S;
        used[size_t(slot)] = 1;
        EXPECT_LE(rel_l2(slice(state, size_t(slot) * st.slot_elems(), st.slot_elems()), S), kAttnTol)
            << "snapshot after position " << s.start_pos + i + 1 << " in slot " << slot;
      }
    }
    const size_t o0 = size_t(t0 * P), on = size_t(s.n_new * P);
    EXPECT_LE(rel_l2(slice(got, o0, on), slice(want, o0, on)), kAttnTol) << "output";
    EXPECT_LE(rel_l2(slice(state, size_t(s.slot) * st.slot_elems(), st.slot_elems()), S), kAttnTol)
        << "state";
    st.oracle[size_t(s.slot)] = S;
    used[size_t(s.slot)] = 1;
    t0 += s.n_new;
  }
  for (int slot = 0; slot < st.n_slots; ++slot) {
    if (used[size_t(slot)]) continue;
    const size_t s0 = size_t(slot) * st.slot_elems();
    EXPECT_EQ(slice(state, s0, st.slot_elems()), slice(before, s0, st.slot_elems()))
        << "slot " << slot << " belongs to no sequence of the step";
  }
  std::printf("[ kda      ] %zu seqs, %lld tokens: output rel-L2 %.1e\n", seqs.size(), (long long)T,
              rel_l2(got, want));
}

// -------------------------------------------------------------------------------------------- kda_prepare

// kda_prepare's CPU tensors: the inputs (q|k|v, the gate projections, conv weights, the slots' windows, the
// gate parameters) and NaN-poisoned outputs.
struct PrepareTensors {
  BackendTensor qkv, graw, braw, conv_w, windows, a_log, dt_bias;
  BackendTensor q, k, v, g, beta;
};

PrepareTensors prepare_tensors(OpHarness& h, int heads, const GateParams& gp, const std::vector<float>& qkv,
                               const std::vector<float>& graw, const std::vector<float>& braw,
                               const std::vector<float>& conv_w, const std::vector<float>& windows) {
  const int64_t P = int64_t(heads) * kD, T = int64_t(qkv.size()) / (3 * P),
                n_slots = int64_t(windows.size()) / ((kK - 1) * 3 * P);
  const Shape act{T, heads, kD};
  return {h.put(h.cpu(), qkv, DType::F32, {T, 3 * P}),
          h.put(h.cpu(), graw, DType::F32, {T, P}),
          h.put(h.cpu(), braw, DType::F32, {T, heads}),
          h.put(h.cpu(), conv_w, DType::F32, {3 * P, kK}),
          h.put(h.cpu(), windows, DType::F32, {n_slots, kK - 1, 3 * P}),
          h.put(h.cpu(), gp.a_log, DType::F32, {heads}),
          h.put(h.cpu(), gp.dt_bias, DType::F32, {P}),
          h.empty(h.cpu(), DType::F32, act),
          h.empty(h.cpu(), DType::F32, act),
          h.empty(h.cpu(), DType::F32, act),
          h.empty(h.cpu(), DType::F32, act),
          h.empty(h.cpu(), DType::F32, {T, heads})};
}

backend::KdaPrepareArgs prepare_args(const PrepareTensors& t, int heads, const GateParams& gp,
                                     const backend::BatchLayout& l) {
  backend::KdaPrepareArgs a;
  a.qkv = t.qkv.view;
  a.conv_weight = t.conv_w.view;
  a.conv_state = t.windows.view;
  a.graw = t.graw.view;
  a.braw = t.braw.view;
  a.a_log = t.a_log.view;
  a.dt_bias = t.dt_bias.view;
  a.gate_lower_bound = gp.lower_bound;
  a.n_heads = heads;
  a.head_dim = kD;
  a.layout = &l;
  a.q = t.q.view;
  a.k = t.k.view;
  a.v = t.v.view;
  a.g = t.g.view;
  a.beta = t.beta.view;
  return a;
}

void check_prepare(OpHarness& h, int heads, Gate gate, const std::vector<StepSeq>& seqs, int n_slots) {
  SCOPED_TRACE(::testing::Message() << gate_name(gate) << ", Hk " << heads);
  const model::StepBatch batch = make_step(seqs, 64);
  const int64_t T = batch.n_tokens(), P = int64_t(heads) * kD;
  const GateParams gp = gate_params(h, heads, gate);
  const std::vector<float> qkv = h.randn(T * 3 * P, 1.0f, false), graw = h.randn(T * P, 2.0f, false),
                           braw = h.randn(T * heads, 2.0f, false), conv_w = h.randn(3 * P * kK, 0.5f, false),
                           windows = h.randn(int64_t(n_slots) * (kK - 1) * 3 * P, 1.0f, false);
  const PrepareTensors t = prepare_tensors(h, heads, gp, qkv, graw, braw, conv_w, windows);
  const backend::BatchLayout l = cpu_layout(h, batch, 64);
  const Status status = h.cpu().kda_prepare(prepare_args(t, heads, gp, l));
  ASSERT_TRUE(status.ok()) << status.message();

  const PrepareRef want = prepare_reference(batch, qkv, conv_w, windows, graw, braw, gp, heads);
  EXPECT_TRUE(elementwise_near(h.get(h.cpu(), t.q.view), want.q, kPrepareTol, kPrepareFloor)) << "q";
  EXPECT_TRUE(elementwise_near(h.get(h.cpu(), t.k.view), want.k, kPrepareTol, kPrepareFloor)) << "k";
  EXPECT_TRUE(elementwise_near(h.get(h.cpu(), t.v.view), want.v, kPrepareTol, kPrepareFloor)) << "v";
  EXPECT_TRUE(elementwise_near(h.get(h.cpu(), t.g.view), want.g, kPrepareTol, kPrepareFloor)) << "g";
  EXPECT_TRUE(elementwise_near(h.get(h.cpu(), t.beta.view), want.beta, kPrepareTol, kPrepareFloor)) << "beta";
  // The windows hold copies of pre-conv inputs (or keep their bytes where no sequence uses the slot): exact.
  const std::vector<float> windows_after = h.get(h.cpu(), t.windows.view);
  EXPECT_EQ(windows_after, std::vector<float>(want.windows.begin(), want.windows.end())) << "conv windows";
}

TEST(KdaCpu, PrepareFollowsTheConvGatesAndBetaFormulas) {
  OpHarness h(kCpuOnly);
  // Decode rows reading the carried window, continuations shorter than the window (n < K-1) shifting it,
  // fresh sequences over garbage windows, a 70-token prefill, slots out of sequence order, slot 8 unused.
  const std::vector<StepSeq> seqs = {{0, 1, 3}, {5, 1, 0}, {7, 2, 5}, {0, 70, 1}, {33, 17, 2},
                                     {2, 3, 4}, {1, 1, 6}, {0, 2, 7}, {9, 14, 9}, {100, 1, 10}};
  for (Gate gate : kGates) check_prepare(h, 2, gate, seqs, 11);
  check_prepare(h, 3, Gate::Softplus, {{0, 200, 0}}, 1);
  check_prepare(h, 1, Gate::Bounded, {{40, 1, 0}}, 1);
}

// Prefix caching's in-step snapshots: each request's slot gets the window as it is after its position, the K-1
// pre-conv rows of the step just before it (copied by hand here from qkv), bit for bit; slots no request or
// sequence names keep their bytes. A request whose slot lies outside the conv state is refused.
TEST(KdaCpu, PrepareWritesEachSnapshotsConvWindow) {
  OpHarness h(kCpuOnly);
  const int heads = 1, n_slots = 8;
  const int64_t P = int64_t(heads) * kD, C = 3 * P, W = (kK - 1) * C;
  // Two snapshots in a fresh prefill, one past a cached prefix (position 37 + 64), a decode row beside them.
  const std::vector<StepSeq> seqs = {{0, 200, 0, {}, {{64, 3}, {192, 4}}}, {5, 1, 2}, {37, 100, 1, {}, {{101, 5}}}};
  const model::StepBatch batch = make_step(seqs, 64);
  const int64_t T = batch.n_tokens();
  const GateParams gp = gate_params(h, heads, Gate::Softplus);
  const std::vector<float> qkv = h.randn(T * C, 1.0f, false), windows = h.randn(n_slots * W, 1.0f, false);
  const PrepareTensors t = prepare_tensors(h, heads, gp, qkv, h.randn(T * P, 1.0f, false),
                                           h.randn(T * heads, 1.0f, false), h.randn(C * kK, 0.5f, false), windows);
  const backend::BatchLayout l = cpu_layout(h, batch, 64);
  ASSERT_EQ(l.kda_snapshots.n, 3);
  const Status st = h.cpu().kda_prepare(prepare_args(t, heads, gp, l));
  ASSERT_TRUE(st.ok()) << st.message();

  const std::vector<float> after = h.get(h.cpu(), t.windows.view);
  // The token index of each sequence's first new token, then the rows [end - (K-1), end) of each request.
  const int64_t seq_row[] = {0, 200, 201};
  const struct {
    int seq, pos, slot;
  } requests[] = {{0, 64, 3}, {0, 192, 4}, {2, 101, 5}};
  for (const auto& r : requests) {
    const int64_t end = seq_row[r.seq] + r.pos - seqs[size_t(r.seq)].start_pos;
    EXPECT_EQ(slice(after, size_t(r.slot * W), size_t(W)), slice(qkv, size_t((end - (kK - 1)) * C), size_t(W)))
        << "the window of the snapshot after position " << r.pos << " in slot " << r.slot;
  }
  for (int slot : {6, 7})
    EXPECT_EQ(slice(after, size_t(slot * W), size_t(W)), slice(windows, size_t(slot * W), size_t(W)))
        << "slot " << slot << " is no sequence's and no snapshot's";

  backend::BatchLayoutHost bad;
  ASSERT_TRUE(batch.to_layout(64, &bad).ok());
  bad.kda_snapshots.requests[1].slot = n_slots;
  backend::BatchLayout bad_l;
  ASSERT_TRUE(h.cpu().upload_layout(bad, 64, &bad_l).ok());
  const Status refused = h.cpu().kda_prepare(prepare_args(t, heads, gp, bad_l));
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("slot 8"), std::string::npos) << refused.message();
}

// ------------------------------------------------------------------------------------------ kda_attention

TEST(KdaCpu, OneShotPrefillMatchesTheRecurrence) {
  OpHarness h(kCpuOnly);
  for (Gate gate : kGates) {
    const GateParams gp = gate_params(h, 2, gate);
    for (int n : {2, 3, 63, 64, 65, 128, 200}) {  // within one chunk, at and across chunk boundaries
      SCOPED_TRACE(::testing::Message() << gate_name(gate) << ", " << n << " tokens");
      States st = make_states(h, 2, 2, 1.0f);  // garbage in the slot: a fresh sequence must ignore it
      check_attention_step(h, st, {{0, n, 1}}, gp);
    }
  }
}

// The state of one call is the next call's initial state, through every path: chunked after chunked,
// recurrent after chunked and chunked after recurrent.
TEST(KdaCpu, StateCarriesAcrossCalls) {
  OpHarness h(kCpuOnly);
  for (Gate gate : kGates) {
    SCOPED_TRACE(gate_name(gate));
    const GateParams gp = gate_params(h, 2, gate);
    States st = make_states(h, 1, 2, 0.5f);
    int pos = 0;
    for (int n : {70, 1, 1, 2, 64, 1, 130, 5}) {
      SCOPED_TRACE(::testing::Message() << "call of " << n << " tokens at " << pos);
      check_attention_step(h, st, {{pos, n, 0}}, gp);
      pos += n;
    }
    // A sequence continuing from a state it did not build here (a restored prefix): the slot's contents.
    States restored = make_states(h, 1, 2, 0.5f);
    check_attention_step(h, restored, {{1000, 90, 0}}, gp);
  }
}

TEST(KdaCpu, DecodeStepsAreTheRecurrence) {
  OpHarness h(kCpuOnly);
  for (Gate gate : {Gate::SoftplusMild, Gate::Bounded}) {
    SCOPED_TRACE(gate_name(gate));
    const GateParams gp = gate_params(h, 2, gate);
    States st = make_states(h, 3, 2, 1.0f);
    check_attention_step(h, st, {{0, 1, 2}}, gp);  // a one-token prompt: fresh, on the recurrent path
    for (int pos = 1; pos < 6; ++pos) check_attention_step(h, st, {{pos, 1, 2}, {40 + pos, 1, 0}}, gp);
  }
}

// Prefill chunks and decode tokens of several sequences in one step, slots shuffled against the sequence
// order (slot 3 used by nobody), in-step snapshots at chunk boundaries; then a decode step over the states
// the first one wrote, sequences in reverse order.
TEST(KdaCpu, RaggedBatchWithShuffledSlotsAndSnapshots) {
  OpHarness h(kCpuOnly);
  for (Gate gate : kGates) {
    SCOPED_TRACE(gate_name(gate));
    const GateParams gp = gate_params(h, 2, gate);
    States st = make_states(h, 12, 2, 0.5f);
    const std::vector<StepSeq> step1 = {
        {40, 1, 7},   {0, 130, 2, {}, {{64, 9}, {128, 10}}}, {12, 1, 0}, {3, 2, 5}, {0, 1, 8},
        {100, 64, 1}, {9, 150, 4, {}, {{73, 11}}},           {0, 3, 6}};
    check_attention_step(h, st, step1, gp);
    std::vector<StepSeq> step2;
    for (const StepSeq& s : step1) step2.push_back({s.start_pos + s.n_new, 1, s.slot});
    std::reverse(step2.begin(), step2.end());
    check_attention_step(h, st, step2, gp);
  }
}

// The model's use: kda_prepare then kda_attention, call after call with the conv window and the state
// carried, against one fp64 pass over the whole sequence from the raw projections.
TEST(KdaCpu, PipelineSplitOverCallsFollowsTheWholeSequence) {
  OpHarness h(kCpuOnly);
  const int heads = 2, T = 150;
  const int64_t P = int64_t(heads) * kD;
  for (Gate gate : kGates) {
    SCOPED_TRACE(gate_name(gate));
    const GateParams gp = gate_params(h, heads, gate);
    const std::vector<float> qkv = h.randn(T * 3 * P, 1.0f, false), graw = h.randn(T * P, 1.0f, false),
                             braw = h.randn(T * heads, 1.0f, false),
                             conv_w = h.randn(3 * P * kK, 0.5f, false);
    const BackendTensor qkv_t = h.put(h.cpu(), qkv, DType::F32, {T, 3 * P}),
                        graw_t = h.put(h.cpu(), graw, DType::F32, {T, P}),
                        braw_t = h.put(h.cpu(), braw, DType::F32, {T, heads}),
                        conv_t = h.put(h.cpu(), conv_w, DType::F32, {3 * P, kK}),
                        a_log_t = h.put(h.cpu(), gp.a_log, DType::F32, {heads}),
                        dt_bias_t = h.put(h.cpu(), gp.dt_bias, DType::F32, {P});
    // Garbage in the window and state of the slot: the first call starts the sequence and must ignore both.
    const BackendTensor window = h.put(h.cpu(), h.randn((kK - 1) * 3 * P), DType::F32, {1, kK - 1, 3 * P}),
                        state = h.put(h.cpu(), h.randn(heads * kD * kD), DType::F32, {1, heads, kD, kD});
    const Shape act{T, heads, kD};
    const BackendTensor q = h.empty(h.cpu(), DType::F32, act), k = h.empty(h.cpu(), DType::F32, act),
                        v = h.empty(h.cpu(), DType::F32, act), g = h.empty(h.cpu(), DType::F32, act),
                        beta = h.empty(h.cpu(), DType::F32, {T, heads}),
                        out = h.empty(h.cpu(), DType::F32, act);
    int pos = 0;
    for (int n : {1, 2, 64, 3, 80}) {
      const backend::BatchLayout l = cpu_layout(h, make_step({{pos, n, 0}}, 64), 64);
      backend::KdaPrepareArgs a;
      a.qkv = qkv_t.view.rows(pos, n);
      a.conv_weight = conv_t.view;
      a.conv_state = window.view;
      a.graw = graw_t.view.rows(pos, n);
      a.braw = braw_t.view.rows(pos, n);
      a.a_log = a_log_t.view;
      a.dt_bias = dt_bias_t.view;
      a.gate_lower_bound = gp.lower_bound;
      a.n_heads = heads;
      a.head_dim = kD;
      a.layout = &l;
      a.q = q.view.rows(pos, n);
      a.k = k.view.rows(pos, n);
      a.v = v.view.rows(pos, n);
      a.g = g.view.rows(pos, n);
      a.beta = beta.view.rows(pos, n);
      const Status sp = h.cpu().kda_prepare(a);
      ASSERT_TRUE(sp.ok()) << sp.message();
      const Status sa =
          h.cpu().kda_attention({a.q, a.k, a.v, a.g, a.beta, state.view, &l, out.view.rows(pos, n), nullptr});
      ASSERT_TRUE(sa.ok()) << sa.message();
      pos += n;
    }

    const model::StepBatch whole = make_step({{0, T, 0}}, 64);
    const PrepareRef ref = prepare_reference(whole, qkv, conv_w, std::vector<float>((kK - 1) * 3 * P, 0.0f),
                                             graw, braw, gp, heads);
    std::vector<double> want(size_t(T * P)), S(size_t(heads) * kD * kD, 0.0);
    for (int hh = 0; hh < heads; ++hh)
      for (int t = 0; t < T; ++t) {
        const size_t x = size_t(t) * size_t(P) + size_t(hh * kD);
        delta_rule_token(&S[size_t(hh) * kD * kD], &ref.q[x], &ref.k[x], &ref.v[x], &ref.g[x],
                         ref.beta[size_t(t * heads + hh)], &want[x]);
      }
    const double out_err = rel_l2(h.get(h.cpu(), out.view), want);
    EXPECT_LE(out_err, kAttnTol) << "output";
    EXPECT_LE(rel_l2(h.get(h.cpu(), state.view), S), kAttnTol) << "final state";
    EXPECT_EQ(h.get(h.cpu(), window.view), slice(qkv, size_t((T - kK + 1) * 3 * P), size_t((kK - 1) * 3 * P)))
        << "the window after the last call holds the last K-1 inputs";
    std::printf("[ kda      ] %s pipeline over 5 calls: output rel-L2 %.1e\n", gate_name(gate), out_err);
  }
}

}  // namespace
}  // namespace rill::testing
