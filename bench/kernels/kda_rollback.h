// Host side of the KDA rollback lab (issue #21, kda_rollback_bench.cu): the double-precision reference of the
// gated delta rule (spec kimi-architecture.md §3.3 step 6), the replay records and their fold, which state
// each strategy commits after `a` accepted drafts, and the bytes and memory each one costs. Header-only and
// free of CUDA so that the lab's logic is tested on the CPU (tests/bench/kda_rollback_test.cc); the GPU adds
// the kernels. C++17 (the lab's .cu includes it; CMake 3.25 has no CUDA20 dialect).
//
// A verify step feeds k + 1 tokens [last, d1..dk] per sequence; accepting a drafts (0 <= a <= k) commits the
// state after fed token a (0-based), i.e. after a + 1 tokens. Per head, with S [d_k][d_v] and row c (a d_k
// channel) decayed by alpha_c = exp(g_c) (rill's layout, recurrent_math.cuh):
//   e_t = v_t - (diag(alpha_t) S_{t-1})^T k̂_t        (the delta rule's correction u_t, from the state held)
//   S_t = diag(alpha_t) S_{t-1} + (beta_t k̂_t) e_t^T  (rank-1 update)
//   o_t = S_t^T q̂_t                                   (the updated state)
// A record is what a fold needs to repeat the update without the state the verify held: (beta k̂, alpha, e).
// beta k̂ is stored as a product because the kernels form it before multiplying by e: the fold then repeats
// the verify's roundings and commits the state bit for bit as the verify computed it.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace rill::bench::kda_rollback {

// [d_k][d_v] row-major: S[c * d + j].
using State = std::vector<double>;

// Inputs of a verify step, laid out as the kernels read them: q, k, v, g [n_seqs][n_tokens][n_heads][d] (q,
// k, v hold bf16 values, as the conv outputs are bf16 in rill; g is the fp32 log-decay), beta
// [n_seqs][n_tokens] [n_heads], and each sequence's state before the step [n_seqs][n_heads][d][d].
struct Inputs {
  int n_seqs = 0, n_tokens = 0, n_heads = 0, d = 0;
  std::vector<float> q, k, v, g, beta, state0;
  size_t row(int s, int t, int h) const { return ((size_t(s) * n_tokens + t) * n_heads + h) * size_t(d); }
  size_t head_state(int s, int h) const { return (size_t(s) * n_heads + h) * size_t(d) * d; }
};

// Random inputs in the ranges a Kimi Linear layer sees: q, k, v ~ N(0, 1) rounded to bf16; the forget gate of
// the model, g = -exp(A_log) softplus(graw + dt_bias), with exp(A_log) ~ U(0.5, 2) per head and the argument
// ~ N(-2, 1.5) (mostly gentle decays, some steep channels); beta = sigmoid(N(0, 1)); a state already
// accumulated over a prompt, S ~ N(0, 0.1^2).
inline Inputs make_inputs(int n_seqs, int n_tokens, int n_heads, int d, uint32_t seed) {
  Inputs in;
  in.n_seqs = n_seqs, in.n_tokens = n_tokens, in.n_heads = n_heads, in.d = d;
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::uniform_real_distribution<float> a_dist(0.5f, 2.0f);
  const size_t rows = size_t(n_seqs) * n_tokens * n_heads;
  std::vector<float> a_head(static_cast<size_t>(n_heads));
  for (float& a : a_head) a = a_dist(rng);
  for (std::vector<float>* x : {&in.q, &in.k, &in.v}) {
    x->resize(rows * d);
    for (float& e : *x) e = round_to_bf16(n01(rng));
  }
  in.g.resize(rows * d);
  for (size_t r = 0; r < rows; ++r)
    for (int c = 0; c < d; ++c) {
      const double x = -2.0 + 1.5 * n01(rng);
      in.g[r * d + c] = float(-a_head[r % n_heads] * std::log1p(std::exp(x)));
    }
  in.beta.resize(rows);
  for (float& b : in.beta) b = float(1.0 / (1.0 + std::exp(-double(n01(rng)))));
  in.state0.resize(size_t(n_seqs) * n_heads * d * d);
  for (float& x : in.state0) x = 0.1f * n01(rng);
  return in;
}

// What a fold needs of one token of one head.
struct Record {
  std::vector<double> bk, alpha, e;  // beta k̂, exp(g) (d_k each), the correction e (d_v)
};

// One token of one head in double, as the kernels do it in fp32: q and k L2-normalised (eps 1e-6 on the sum
// of squares), q scaled by d^-1/2. Updates S in place, writes o_t to `out` (d) and returns the token's
// record.
inline Record step(State& S, int d, const float* q, const float* k, const float* v, const float* g,
                   float beta, double* out) {
  double qq = 0, kk = 0;
  for (int c = 0; c < d; ++c) qq += double(q[c]) * q[c], kk += double(k[c]) * k[c];
  const double qn = 1.0 / std::sqrt(qq + 1e-6) / std::sqrt(double(d)), kn = 1.0 / std::sqrt(kk + 1e-6);
  Record r;
  r.bk.resize(size_t(d)), r.alpha.resize(size_t(d)), r.e.resize(size_t(d));
  std::vector<double> kh(static_cast<size_t>(d)), qh(static_cast<size_t>(d));
  for (int c = 0; c < d; ++c) {
    kh[c] = k[c] * kn, qh[c] = q[c] * qn;
    r.alpha[c] = std::exp(double(g[c]));
    r.bk[c] = beta * kh[c];
  }
  for (int c = 0; c < d; ++c)
    for (int j = 0; j < d; ++j) S[size_t(c) * d + j] *= r.alpha[c];
  for (int j = 0; j < d; ++j) {
    double a = 0;
    for (int c = 0; c < d; ++c) a += kh[c] * S[size_t(c) * d + j];
    r.e[j] = v[j] - a;
  }
  for (int c = 0; c < d; ++c)
    for (int j = 0; j < d; ++j) S[size_t(c) * d + j] += r.bk[c] * r.e[j];
  for (int j = 0; j < d; ++j) {
    double o = 0;
    for (int c = 0; c < d; ++c) o += qh[c] * S[size_t(c) * d + j];
    out[j] = o;
  }
  return r;
}

// One record applied to the state it was computed from: S = diag(alpha) S + (beta k̂) e^T.
inline void fold(State& S, int d, const Record& r) {
  for (int c = 0; c < d; ++c)
    for (int j = 0; j < d; ++j) S[size_t(c) * d + j] = r.alpha[c] * S[size_t(c) * d + j] + r.bk[c] * r.e[j];
}

inline State initial_state(const Inputs& in, int s, int h) {
  const float* p = in.state0.data() + in.head_state(s, h);
  return State(p, p + size_t(in.d) * in.d);
}

// The recurrence over the first n tokens of sequence s, head h: the state, output and record after each.
struct HeadRun {
  std::vector<State> states;                 // states[t]: after fed token t
  std::vector<std::vector<double>> outputs;  // outputs[t]: o_t (d)
  std::vector<Record> records;               // records[t]: from the state before token t
};

inline HeadRun run_head(const Inputs& in, int s, int h, int n) {
  HeadRun run;
  State S = initial_state(in, s, h);
  for (int t = 0; t < n; ++t) {
    const size_t x = in.row(s, t, h);
    std::vector<double> o(static_cast<size_t>(in.d));
    run.records.push_back(step(S, in.d, &in.q[x], &in.k[x], &in.v[x], &in.g[x],
                               in.beta[(size_t(s) * in.n_tokens + t) * in.n_heads + h], o.data()));
    run.states.push_back(S);
    run.outputs.push_back(std::move(o));
  }
  return run;
}

// --- Which state each strategy commits after a accepted drafts of k (0 <= a <= k) -------------------------

inline int verify_tokens(int k) {
  return k + 1;
}  // [last, d1..dk]
inline int committed_tokens(int a) {
  return a + 1;
}  // the committed state is the one after fed token a

// Checkpoint + re-feed (rill today): the slot was copied to its checkpoint before the step and the verify ran
// in place, so after all k accepted the slot holds the committed state; otherwise the checkpoint (the state
// before the step) is copied back and the next step feeds the a + 1 committed tokens again.
struct CheckpointAction {
  bool restore = false;
  int refeed_tokens = 0;
};
inline CheckpointAction checkpoint_action(int a, int k) {
  if (a == k) return {};
  return {true, committed_tokens(a)};
}

// Per-token states: the verify wrote the state after fed token t < k to per-token buffer t and the one after
// token k in place, so the committed state is in the slot (a == k) or in buffer a (copied to the slot, or the
// sequence pointed at it).
struct PerTokenSource {
  bool in_slot = false;
  int buffer = -1;  // the per-token buffer to select when not in the slot
};
inline PerTokenSource per_token_source(int a, int k) {
  if (a == k) return {true, -1};
  return {false, a};
}

// Replay records: the verify left the slot as it was and wrote k + 1 records; the fold applies the first a
// + 1.
inline int fold_tokens(int a) {
  return committed_tokens(a);
}

// --- Bytes moved and memory added (the lab's report) ------------------------------------------------------

// The KDA of Kimi-Linear-48B (spec §1.1): 32 heads of 128, fp32 state, 20 KDA layers.
struct Shape {
  int n_heads = 32, head_dim = 128, n_layers = 20;
};

// One sequence's state of one layer.
inline double state_bytes(const Shape& s) {
  return 4.0 * s.n_heads * s.head_dim * s.head_dim;
}
// One token's records of one layer, every head: beta k̂, alpha and e in fp32.
inline double record_bytes(const Shape& s) {
  return 3.0 * 4 * s.head_dim * s.n_heads;
}
// One fed token's inputs and output of one layer, every head: q, k, v bf16, g fp32, beta fp32, o fp32 (the
// lab's output; rill's is bf16). The same for every strategy.
inline double token_io_bytes(const Shape& s) {
  return double(s.n_heads) * (3.0 * 2 * s.head_dim + 4.0 * s.head_dim + 4 + 4.0 * s.head_dim);
}

enum class Strategy {
  Checkpoint,       // (0) copy before the step, verify in place, restore copy on a rejection (+ re-feed)
  CheckpointFused,  // (0f) as (0), the checkpoint written by the verify kernel from the state it loaded
  PerToken,         // (1) the verify writes the state after each token; a select copy on a rejection
  Records,          // (2) read-only verify writing records; a fold of a + 1 records
};

// Bytes one sequence moves in one layer, by phase: before the step (checkpoint copy), the verify kernel,
// after acceptance (restore, select copy or fold). The next step's re-feed is refeed_bytes.
struct Traffic {
  double before = 0, verify = 0, after = 0;
  double total() const { return before + verify + after; }
};

inline Traffic traffic(Strategy st, const Shape& s, int k, int a) {
  const double S = state_bytes(s), io = verify_tokens(k) * token_io_bytes(s);
  Traffic t;
  switch (st) {
    case Strategy::Checkpoint:
      t.before = 2 * S;                                       // slot -> checkpoint
      t.verify = 2 * S + io;                                  // read, write in place
      t.after = checkpoint_action(a, k).restore ? 2 * S : 0;  // checkpoint -> slot
      break;
    case Strategy::CheckpointFused:
      t.verify = 3 * S + io;  // read once, write the checkpoint and the slot
      t.after = checkpoint_action(a, k).restore ? 2 * S : 0;
      break;
    case Strategy::PerToken:
      t.verify = S + verify_tokens(k) * S + io;  // k per-token states and the last in place
      t.after = per_token_source(a, k).in_slot ? 0 : 2 * S;
      break;
    case Strategy::Records:
      t.verify = S + verify_tokens(k) * record_bytes(s) + io;
      t.after = 2 * S + fold_tokens(a) * record_bytes(s);
      break;
  }
  return t;
}

// What the next step reads and writes in addition for the a + 1 re-fed tokens (its state traffic it has
// anyway).
inline double refeed_bytes(const Shape& s, int a, int k) {
  return checkpoint_action(a, k).refeed_tokens * token_io_bytes(s);
}

// Memory a strategy adds per sequence over all KDA layers (what `rill inspect` would report beside the 40 MiB
// state of the 48B): one checkpoint state, k per-token states, or k + 1 tokens' records.
inline double added_memory(Strategy st, const Shape& s, int k) {
  switch (st) {
    case Strategy::Checkpoint:
    case Strategy::CheckpointFused:
      return state_bytes(s) * s.n_layers;
    case Strategy::PerToken:
      return double(k) * state_bytes(s) * s.n_layers;
    case Strategy::Records:
      return verify_tokens(k) * record_bytes(s) * s.n_layers;
  }
  return 0;
}

}  // namespace rill::bench::kda_rollback
