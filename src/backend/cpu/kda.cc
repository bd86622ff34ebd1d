// Kimi Delta Attention on the CPU (spec §3.3): short conv + SiLU with the per-slot conv window, gates,
// beta; then the gated delta rule, recurrent, token by token in fp32.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace rill::backend {
namespace {

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// One sequence's conv over its new tokens, reading older inputs from the window, then updating the window.
void conv_sequence(const KdaPrepareArgs& a, int s, std::vector<float>& window) {
  const BatchLayout& l = *a.layout;
  const int64_t C = a.qkv.size(1), K = a.conv_weight.size(1), P = C / 3;
  const int t0 = l.seq_token_start[s], n = l.seq_token_start[s + 1] - t0;
  float* state = a.conv_state.ptr<float>() + int64_t(l.seq_state_slot[s]) * a.conv_state.stride(0);
  // history = [K-1 older inputs | n new inputs], channel-minor; a fresh sequence has zero history.
  const int64_t hist = K - 1 + n;
  window.assign(static_cast<size_t>(hist * C), 0.0f);
  if (l.seq_start_pos[s] > 0) std::memcpy(window.data(), state, size_t((K - 1) * C) * sizeof(float));
  for (int i = 0; i < n; ++i) std::memcpy(&window[size_t((K - 1 + i) * C)], cpu::row_f32(a.qkv, t0 + i), size_t(C) * 4);
  const float* w = a.conv_weight.ptr<float>();
  for (int i = 0; i < n; ++i) {
    const int t = t0 + i;
    for (int64_t c = 0; c < C; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < K; ++j) acc += w[c * K + j] * window[size_t((i + j) * C + c)];
      const float y = cpu::silu(acc);
      const int64_t which = c / P, ch = c % P;  // q, k or v; channel within it
      const TensorView& out = which == 0 ? a.q : which == 1 ? a.k : a.v;
      out.ptr<float>()[t * out.stride(0) + ch] = y;  // [T, Hk, d] contiguous in (Hk, d)
    }
  }
  // Replay records: the window stays as it was; the step's inputs go to the slot's records for kda_fold.
  if (!a.conv_records.empty() && l.seq_kda_records && l.seq_kda_records[s]) {
    float* rec = a.conv_records.ptr<float>() + int64_t(l.seq_state_slot[s]) * a.conv_records.stride(0);
    for (int i = 0; i < n; ++i)
      std::memcpy(rec + i * a.conv_records.stride(1), &window[size_t((K - 1 + i) * C)], size_t(C) * sizeof(float));
    return;
  }
  std::memcpy(state, &window[size_t(n * C)], size_t((K - 1) * C) * sizeof(float));
  // In-step snapshots (prefix caching): the window after position pos is the K-1 inputs before it, window
  // rows [rel, rel + K-1) with rel the step's inputs folded in by then — as the step's end above (rel = n).
  const KdaSnapshots& snaps = l.kda_snapshots;
  if (snaps.n == 0) return;
  for (int j = snaps.seq_begin[s]; j < snaps.seq_begin[s + 1]; ++j) {
    const int64_t rel = snaps.requests[j].pos - l.seq_start_pos[s];
    float* snap = a.conv_state.ptr<float>() + int64_t(snaps.requests[j].slot) * a.conv_state.stride(0);
    std::memcpy(snap, &window[size_t(rel * C)], size_t((K - 1) * C) * sizeof(float));
  }
}

}  // namespace

Status CpuBackend::kda_prepare_impl(const KdaPrepareArgs& a) {
  const BatchLayout& l = *a.layout;
  for (int s = 0; s < l.n_seqs; ++s) {
    const int slot = l.seq_state_slot[s];
    if (slot < 0 || slot >= a.conv_state.size(0))
      return internal_error("kda_prepare: state slot {} outside [0, {})", slot, a.conv_state.size(0));
  }
  for (int j = 0; j < l.kda_snapshots.n; ++j)
    if (const int32_t slot = l.kda_snapshots.requests[j].slot; slot < 0 || slot >= a.conv_state.size(0))
      return internal_error("kda_prepare: snapshot slot {} outside [0, {})", slot, a.conv_state.size(0));
  cpu::pool().parallel_for(l.n_seqs, 1, [&](int64_t b, int64_t e) {
    std::vector<float> window;
    for (int64_t s = b; s < e; ++s) conv_sequence(a, int(s), window);
  });
  const int64_t T = l.n_tokens, Hk = a.n_heads, d = a.head_dim;
  const float* a_log = a.a_log.ptr<float>();
  const float* dt_bias = a.dt_bias.ptr<float>();
  cpu::pool().parallel_for(T, 8, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* gr = cpu::row_f32(a.graw, t);
      float* g = a.g.ptr<float>() + t * a.g.stride(0);
      for (int64_t h = 0; h < Hk; ++h) {
        const float decay = std::exp(a_log[h]);
        for (int64_t c = 0; c < d; ++c) {
          const float x = gr[h * d + c] + dt_bias[h * d + c];
          g[h * d + c] = a.gate_lower_bound ? *a.gate_lower_bound * cpu::sigmoid(decay * x)  // K3, bounded
                                            : -decay * softplus(x);                          // Kimi Linear
        }
        a.beta.ptr<float>()[t * a.beta.stride(0) + h] = cpu::sigmoid(cpu::row_f32(a.braw, t)[h]);
      }
    }
  });
  return {};
}

namespace {

// L2-normalised q (times d^-1/2) and k for the tokens of one head, [n, d] each.
void normalise_qk(const KdaAttentionArgs& a, int t0, int n, int64_t h, float* q, float* k) {
  const int64_t d = a.q.size(2);
  const float scale = 1.0f / std::sqrt(float(d));
  for (int i = 0; i < n; ++i) {
    const float* qs = a.q.ptr<float>() + (t0 + i) * a.q.stride(0) + h * a.q.stride(1);
    const float* ks = a.k.ptr<float>() + (t0 + i) * a.k.stride(0) + h * a.k.stride(1);
    float qq = 0, kk = 0;
    for (int64_t c = 0; c < d; ++c) qq += qs[c] * qs[c], kk += ks[c] * ks[c];
    const float qn = 1.0f / std::sqrt(qq + 1e-6f), kn = 1.0f / std::sqrt(kk + 1e-6f);
    for (int64_t c = 0; c < d; ++c) q[i * d + c] = qs[c] * qn * scale, k[i * d + c] = ks[c] * kn;
  }
}

// The recurrent form, token by token, for every step: the state after a token is then the same bits however
// the tokens were split into steps (one-token decode steps, a speculative verify step of k + 1, prefill
// chunks of any size, a prefix-cache resume), so greedy and seeded output do not depend on batching,
// chunking or speculation. The chunked form (spec §3.3) sums in another order wherever a step cuts its
// chunks: in double, with S rounded to fp32 at chunk ends, its ~1e-6 differences were still enough to flip
// seeded samples between near-tied tokens (the sampler's inverse CDF over tokens sorted by probability swaps
// two tokens a rounding apart): Speculative.SeededSamplingEqualsSamplingWithoutSpeculation/1 at seed
// 1741313225 failed one run in four, as the steps its prompts were prefilled in varied with timing. It is the
// GPU's form; the CPU is the oracle, and the recurrence has no triangular solve to lose digits in.
//
// One token: S = diag(alpha) S with alpha = exp(g); e = v - S^T k; S += (beta k) e^T; o = S^T q. S is
// [d_k][d_v]. The two state updates are their own functions because kda_fold repeats them from a token's
// replay record (beta k, alpha, e): the same code on the same floats gives the same bits. `rec` holds 3 d
// floats, [beta k | alpha | e], filled here.
void decay_rows(float* S, const float* alpha, int64_t d) {
  for (int64_t c = 0; c < d; ++c)
    for (int64_t j = 0; j < d; ++j) S[c * d + j] *= alpha[c];
}
void add_rank1(float* S, const float* bk, const float* e, int64_t d) {
  for (int64_t c = 0; c < d; ++c)
    for (int64_t j = 0; j < d; ++j) S[c * d + j] += bk[c] * e[j];
}
void recurrent_step(float* S, const float* q, const float* k, const float* v, const float* g, float beta, int64_t d,
                    float* o, float* rec) {
  float *bk = rec, *alpha = rec + d, *e = rec + 2 * d;
  for (int64_t c = 0; c < d; ++c) alpha[c] = std::exp(g[c]), bk[c] = beta * k[c];
  decay_rows(S, alpha, d);
  for (int64_t j = 0; j < d; ++j) e[j] = v[j];
  for (int64_t c = 0; c < d; ++c)
    for (int64_t j = 0; j < d; ++j) e[j] -= S[c * d + j] * k[c];
  add_rank1(S, bk, e, d);
  for (int64_t j = 0; j < d; ++j) o[j] = 0.0f;
  for (int64_t c = 0; c < d; ++c)
    for (int64_t j = 0; j < d; ++j) o[j] += S[c * d + j] * q[c];
}

}  // namespace

Status CpuBackend::kda_attention_impl(const KdaAttentionArgs& a) {
  const BatchLayout& l = *a.layout;
  const int64_t Hk = a.q.size(1), d = a.q.size(2);
  for (int s = 0; s < l.n_seqs; ++s)
    if (l.seq_state_slot[s] < 0 || l.seq_state_slot[s] >= a.state.size(0))
      return internal_error("kda_attention: state slot {} outside [0, {})", l.seq_state_slot[s], a.state.size(0));
  const KdaSnapshots& snaps = l.kda_snapshots;
  for (int j = 0; j < snaps.n; ++j)
    if (snaps.requests[j].slot < 0 || snaps.requests[j].slot >= a.state.size(0))
      return internal_error("kda_attention: snapshot slot {} outside [0, {})", snaps.requests[j].slot,
                            a.state.size(0));
  cpu::pool().parallel_for(int64_t(l.n_seqs) * Hk, 1, [&](int64_t b, int64_t e) {
    for (int64_t job = b; job < e; ++job) {
      const int s = int(job / Hk);
      const int64_t h = job % Hk;
      const int t0 = l.seq_token_start[s], n = l.seq_token_start[s + 1] - t0;
      if (n == 0) continue;
      float* S = a.state.ptr<float>() + l.seq_state_slot[s] * a.state.stride(0) + h * a.state.stride(1);
      if (l.seq_start_pos[s] == 0) std::fill(S, S + d * d, 0.0f);
      // Replay records: the recurrence runs on a copy, the slot keeps the state from before the step, and
      // each token's (beta k, alpha, e) goes to the slot's records (kda_fold commits the accepted ones).
      const bool records = !a.records.empty() && l.seq_kda_records && l.seq_kda_records[s];
      std::vector<float> copy;
      if (records) {
        copy.assign(S, S + d * d);
        S = copy.data();
      }
      std::vector<float> q(static_cast<size_t>(n * d)), k(static_cast<size_t>(n * d)), v(static_cast<size_t>(n * d)), g(static_cast<size_t>(n * d)), beta(static_cast<size_t>(n)),
          o(static_cast<size_t>(n * d));
      normalise_qk(a, t0, n, h, q.data(), k.data());
      for (int i = 0; i < n; ++i) {
        const int64_t t = t0 + i;
        std::memcpy(&v[i * d], a.v.ptr<float>() + t * a.v.stride(0) + h * a.v.stride(1), size_t(d) * 4);
        std::memcpy(&g[i * d], a.g.ptr<float>() + t * a.g.stride(0) + h * a.g.stride(1), size_t(d) * 4);
        beta[i] = a.beta.ptr<float>()[t * a.beta.stride(0) + h];
      }
      // Snapshots asked for inside the step (prefix caching): copy S out as the recurrence passes them.
      int j = snaps.n > 0 ? snaps.seq_begin[s] : 0;
      const int j_end = snaps.n > 0 ? snaps.seq_begin[s + 1] : 0;
      std::vector<float> rec(static_cast<size_t>(3 * d));
      for (int i = 0; i < n; ++i) {
        recurrent_step(S, &q[i * d], &k[i * d], &v[i * d], &g[i * d], beta[i], d, &o[i * d], rec.data());
        if (records) {
          const int64_t slot = l.seq_state_slot[s];
          std::copy(rec.begin(), rec.end(),
                    a.records.ptr<float>() + slot * a.records.stride(0) + i * a.records.stride(1) + h * a.records.stride(2));
        }
        for (; j < j_end && snaps.requests[j].pos - l.seq_start_pos[s] == i + 1; ++j) {
          float* dst = a.state.ptr<float>() + snaps.requests[j].slot * a.state.stride(0) + h * a.state.stride(1);
          std::copy(S, S + d * d, dst);
        }
      }
      for (int i = 0; i < n; ++i)
        std::memcpy(a.out.ptr<float>() + (t0 + i) * a.out.stride(0) + h * a.out.stride(1), &o[i * d], size_t(d) * 4);
    }
  });
  return {};
}

Status CpuBackend::kda_fold_impl(const KdaFoldArgs& a) {
  const int64_t n = a.slots.size(0), R = a.records.size(1), Hk = a.state.size(1), d = a.state.size(2);
  const int32_t* slots = a.slots.ptr<int32_t>();
  const int32_t* counts = a.n_tokens.ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    if (counts[i] != 0 && (slots[i] < 0 || slots[i] >= a.records.size(0) || counts[i] < 0 || counts[i] > R))
      return internal_error("kda_fold: fold {} of {} records into slot {} outside [0, {}] records x [0, {}) slots",
                            i, counts[i], slots[i], R, a.records.size(0));
  cpu::pool().parallel_for(n * Hk, 1, [&](int64_t b, int64_t e) {
    for (int64_t job = b; job < e; ++job) {
      const int64_t i = job / Hk, h = job % Hk;
      if (counts[i] == 0) continue;
      float* S = a.state.ptr<float>() + slots[i] * a.state.stride(0) + h * a.state.stride(1);
      for (int t = 0; t < counts[i]; ++t) {
        const float* rec =
            a.records.ptr<float>() + slots[i] * a.records.stride(0) + t * a.records.stride(1) + h * a.records.stride(2);
        decay_rows(S, rec + d, d);
        add_rank1(S, rec, rec + 2 * d, d);
      }
    }
  });
  // Conv window: rows [a, a + K-1) of [window (K-1 rows) | the step's inputs]. Every source row lies at or
  // after the row it lands in, so an ascending copy in place is exact.
  const int64_t K1 = a.conv_state.size(1), C = a.conv_state.size(2);
  for (int64_t i = 0; i < n; ++i) {
    if (counts[i] == 0) continue;
    float* win = a.conv_state.ptr<float>() + slots[i] * a.conv_state.stride(0);
    const float* in = a.conv_records.ptr<float>() + slots[i] * a.conv_records.stride(0);
    for (int64_t r = 0; r < K1; ++r) {
      const int64_t src = counts[i] + r;
      const float* from = src < K1 ? win + src * a.conv_state.stride(1) : in + (src - K1) * a.conv_records.stride(1);
      std::memmove(win + r * a.conv_state.stride(1), from, size_t(C) * sizeof(float));
    }
  }
  return {};
}

}  // namespace rill::backend
