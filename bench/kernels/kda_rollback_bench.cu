// KDA rollback lab (issue #21): what it costs to keep, through a speculative verify step, what committing any
// prefix of the drafts needs. A verify feeds k + 1 tokens [last, d1..dk] per sequence through KDA; after a
// accepted drafts the committed state is the one after fed token a. Timed at the Kimi-Linear-48B KDA shape
// (32 heads x 128, fp32 state, one layer; the report scales x20 layers), B in {1, 8, 64}, k in {1, 2, 4, 8},
// all drafts accepted and rejected at a = k/2:
//   (0)  checkpoint + re-feed, rill today: slot -> checkpoint copy (one cudaMemcpyAsync per sequence, as
//        runner::apply_cache_ops issues them), verify in place, checkpoint -> slot on a rejection; the next
//        step feeds the a + 1 committed tokens again (row 0r: their marginal cost in that step's verify);
//   (0b) the same copies as one cudaMemcpyBatchAsync per phase; (0k) one copy kernel per phase;
//   (0f) the checkpoint written by the verify kernel itself;
//   (1)  per-token states: the verify writes the state after each token (k buffers, the last in place), a
//        select copy of state a into the slot;
//   (2)  replay records: a read-only verify writes (beta k̂, alpha, e) per token and head, a fold applies a
//   + 1.
// One verify kernel body serves all (a policy says what it writes), CTA per (sequence, head, 32/64 state
// columns) with the columns in registers as in src/backend/cuda/kda/recurrent_step.cu, whose gates it uses.
// First every strategy is checked against the double reference of kda_rollback.h (outputs of every token, the
// committed state for a = 0, k/2, k, both column widths); then each is timed with CUDA events (3 warm-up,
// median of 31, 15 with --quick) in phases: before the step, the verify, after acceptance, each from a cold
// L2 (a 256 MB read between phases, as the other layers' weights pass through L2 between them in a model
// step) and with the whole sample queued behind a gate before it starts (no host gaps: what a CUDA graph
// would see). Each row prints bytes moved, the fraction of the device-to-device copy bandwidth measured in
// the same run and the memory the strategy adds per sequence at 20 layers; a verdict table for k = 4 at B = 1
// and 64 ends it. Exit code 1 when a check fails; 0 and a note without a GPU.
//
//   kda_rollback_bench [--quick] [--reps N]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/kda/recurrent_math.cuh"
#include "bench/kernels/kda_rollback.h"

namespace {

using namespace rill::bench::kda_rollback;
using rill::cuda::kda::kHeadDim;
using rill::cuda::kda::kStepThreads;
using rill::cuda::kda::step_gates;
using rill::cuda::kda::step_update;
using rill::cuda::kda::StepGates;
using bf16 = __nv_bfloat16;

#define CK(x)                                                                                  \
  do {                                                                                         \
    const cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

constexpr int kHeads = 32;          // Kimi-Linear-48B KDA heads
constexpr int kMaxFoldTokens = 16;  // records one fold CTA stages in shared memory (k <= 15)
constexpr double kTol = 1e-5;       // fp32 kernels vs the double reference, scaled by the largest |ref|

// --- Kernels ---------------------------------------------------------------------------------------------

struct VerifyParams {
  const bf16* q;        // [n_seqs * tok_stride][n_heads][128] conv outputs
  const bf16* k;        // [n_seqs * tok_stride][n_heads][128]
  const bf16* v;        // [n_seqs * tok_stride][n_heads][128]
  const float* g;       // [n_seqs * tok_stride][n_heads][128] log-decay
  const float* beta;    // [n_seqs * tok_stride][n_heads]
  const int* n_tokens;  // [n_seqs] tokens fed from the sequence's first: k + 1 (verify), a + 1 (re-feed)
  int tok_stride, n_heads;
  float* state;       // [n_seqs][n_heads][128][128] the sequence's slot: read; written unless records
  float* out;         // [n_seqs * tok_stride][n_heads][128] fp32 (rill's is bf16: fp32 keeps the check tight)
  float* checkpoint;  // fused checkpoint: [n_seqs][n_heads][128][128], the state before the step
  float* per_token;   // per-token states: [n_seqs][max_drafts][n_heads][128][128], after token t < n - 1
  int max_drafts;     // k: per_token's states per sequence
  float* records;     // records: [n_seqs * tok_stride][n_heads][3][128] = beta k̂, alpha, e per token
};

// What the verify keeps for the rollback: one kernel body, these flags.
struct InPlace {  // (0), (0k): the checkpoint is a separate copy
  static constexpr bool kStoreFinal = true, kCheckpoint = false, kPerToken = false, kRecords = false;
};
struct FusedCheckpoint {  // (0f)
  static constexpr bool kStoreFinal = true, kCheckpoint = true, kPerToken = false, kRecords = false;
};
struct PerTokenStates {  // (1)
  static constexpr bool kStoreFinal = true, kCheckpoint = false, kPerToken = true, kRecords = false;
};
struct ReplayRecords {  // (2): the state is only read
  static constexpr bool kStoreFinal = false, kCheckpoint = false, kPerToken = false, kRecords = true;
};

template <int kR>
__device__ __forceinline__ void store_rows(float* head, int row0, int col, const float4 (&st)[kR]) {
#pragma unroll
  for (int r = 0; r < kR; ++r) __stcs(reinterpret_cast<float4*>(head + (row0 + r) * kHeadDim + col), st[r]);
}

// CTA per (sequence, head, VB state columns), 256 threads: thread (row group, column group) holds kR rows x 4
// columns of S in registers through all of the sequence's tokens; warp 0 forms each token's gates.
template <class Policy, int VB>
__global__ void __launch_bounds__(kStepThreads, VB >= 64 ? 3 : 4) verify_kernel(const VerifyParams p) {
  constexpr int kNcg = VB / 4, kNrg = kStepThreads / kNcg, kR = kHeadDim / kNrg, kNvb = kHeadDim / VB;
  __shared__ StepGates sg;
  __shared__ float4 red_a[kNrg][kNcg], red_b[kNrg][kNcg];
  const int vb = int(blockIdx.x) % kNvb, sh = int(blockIdx.x) / kNvb;
  const int h = sh % p.n_heads, s = sh / p.n_heads;
  const int n = p.n_tokens[s];
  if (n < 1) return;
  const int tid = int(threadIdx.x), cg = tid % kNcg, rg = tid / kNcg, col = vb * VB + cg * 4, row0 = rg * kR;
  const int64_t head = (int64_t(s) * p.n_heads + h) * kHeadDim * kHeadDim;

  float4 st[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r)
    st[r] = __ldcs(reinterpret_cast<const float4*>(p.state + head + (row0 + r) * kHeadDim + col));
  if constexpr (Policy::kCheckpoint) store_rows<kR>(p.checkpoint + head, row0, col, st);

  for (int j = 0; j < n; ++j) {
    const int64_t t = int64_t(s) * p.tok_stride + j, x = (t * p.n_heads + h) * kHeadDim;
    if (tid < 32) {  // lane owns channels 4 lane .. 4 lane + 3
      float q[4], k[4], g[4];
      rill::cuda::load_bf16<4>(p.q + x + tid * 4, q);
      rill::cuda::load_bf16<4>(p.k + x + tid * 4, k);
      const float4 g4 = *reinterpret_cast<const float4*>(p.g + x + tid * 4);
      g[0] = g4.x, g[1] = g4.y, g[2] = g4.z, g[3] = g4.w;
      step_gates(q, k, g, p.beta[t * p.n_heads + h], tid, sg);
    }
    __syncthreads();
    float* rec = p.records + 3 * x;  // the (token, head) record: beta k̂, alpha, e
    if constexpr (Policy::kRecords) {
      if (vb == 0 && tid < kHeadDim) {  // the gates are the same for every column block: one CTA writes them
        rec[tid] =
            sg.beta * sg.kh[tid];  // formed as step_update() forms beta k̂, so the fold repeats its roundings
        rec[kHeadDim + tid] = sg.alpha[tid];
      }
    }
    float v[4];
    rill::cuda::load_bf16<4>(p.v + x + col, v);
    float4 o, e;
    o = step_update<kR, kNrg, kNcg>(st, sg, red_a, red_b, rg, cg, row0, make_float4(v[0], v[1], v[2], v[3]), &e);
    if (rg == 0) {
      *reinterpret_cast<float4*>(p.out + x + col) = o;
      if constexpr (Policy::kRecords) *reinterpret_cast<float4*>(rec + 2 * kHeadDim + col) = e;
    }
    if constexpr (Policy::kPerToken) {
      if (j + 1 < n)
        store_rows<kR>(p.per_token + ((int64_t(s) * p.max_drafts + j) * p.n_heads + h) * kHeadDim * kHeadDim,
                       row0, col, st);
    }
    if (j + 1 < n) __syncthreads();  // the next token's gates and sums overwrite what this one read
  }
  if constexpr (Policy::kStoreFinal) store_rows<kR>(p.state + head, row0, col, st);
}

struct FoldParams {
  float* state;          // [n_seqs][n_heads][128][128] the slot: read once, written once
  const float* records;  // [n_seqs * tok_stride][n_heads][3][128] from the read-only verify
  const int* n_commit;   // [n_seqs] a + 1: the accepted tokens' records to apply
  int tok_stride, n_heads;
};

// S = diag(alpha) S + (beta k̂) e^T for each committed token, in the verify's order of roundings. No column
// sums, so no synchronisation after the records are staged in shared memory.
template <int VB>
__global__ void __launch_bounds__(kStepThreads) fold_kernel(const FoldParams p) {
  constexpr int kNcg = VB / 4, kNrg = kStepThreads / kNcg, kR = kHeadDim / kNrg, kNvb = kHeadDim / VB;
  __shared__ float bk[kMaxFoldTokens][kHeadDim], alpha[kMaxFoldTokens][kHeadDim];
  __shared__ float4 e[kMaxFoldTokens][kNcg];
  const int vb = int(blockIdx.x) % kNvb, sh = int(blockIdx.x) / kNvb;
  const int h = sh % p.n_heads, s = sh / p.n_heads;
  const int n = p.n_commit[s];
  if (n < 1) return;
  const int tid = int(threadIdx.x), cg = tid % kNcg, rg = tid / kNcg, col = vb * VB + cg * 4, row0 = rg * kR;
  float* head = p.state + (int64_t(s) * p.n_heads + h) * kHeadDim * kHeadDim;
  float4 st[kR];  // issued before the records' loads so that both are in flight together
#pragma unroll
  for (int r = 0; r < kR; ++r)
    st[r] = __ldcs(reinterpret_cast<const float4*>(head + (row0 + r) * kHeadDim + col));
  auto record = [&](int j) {
    return p.records + ((int64_t(s) * p.tok_stride + j) * p.n_heads + h) * 3 * kHeadDim;
  };
  for (int i = tid; i < n * kHeadDim; i += kStepThreads) {
    const float* rec = record(i / kHeadDim);
    bk[i / kHeadDim][i % kHeadDim] = rec[i % kHeadDim];
    alpha[i / kHeadDim][i % kHeadDim] = rec[kHeadDim + i % kHeadDim];
  }
  for (int i = tid; i < n * kNcg; i += kStepThreads)
    e[i / kNcg][i % kNcg] =
        *reinterpret_cast<const float4*>(record(i / kNcg) + 2 * kHeadDim + vb * VB + (i % kNcg) * 4);
  __syncthreads();
  for (int j = 0; j < n; ++j) {
    const float4 ej = e[j][cg];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const float a = alpha[j][row0 + r], b = bk[j][row0 + r];
      const float4 x = st[r];
      st[r] = make_float4(fmaf(a, x.x, b * ej.x), fmaf(a, x.y, b * ej.y), fmaf(a, x.z, b * ej.z),
                          fmaf(a, x.w, b * ej.w));
    }
  }
  store_rows<kR>(head, row0, col, st);
}

// One sequence's state of a layer (n_heads x 128 x 128 fp32) from src to dst: checkpoint, restore, select.
struct StateCopy {
  const float* src;
  float* dst;
};

__global__ void copy_states_kernel(const StateCopy* copies, int64_t n_float4) {
  const StateCopy c = copies[blockIdx.y];
  const float4* src = reinterpret_cast<const float4*>(c.src);
  float4* dst = reinterpret_cast<float4*>(c.dst);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_float4;
       i += int64_t(gridDim.x) * blockDim.x)
    __stcs(dst + i, __ldcs(src + i));
}

// Reads a buffer larger than L2 so that the next phase starts cold; clean lines, so nothing is written back
// inside a timed range.
__global__ void flush_kernel(const float4* p, int64_t n, float* sink) {
  float acc = 0.0f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float4 x = p[i];
    acc += x.x + x.y + x.z + x.w;
  }
  if (acc == 1234.5678f) *sink = acc;  // never true for the zero-filled buffer; keeps the loads
}

// Holds the stream until the host has queued a whole sample, so the timed ranges hold no gaps from the host
// issuing work (e.g. 64 cudaMemcpyAsync calls); gives up after ~1 s so a lost flag cannot hang the lab.
__global__ void gate_kernel(const volatile int* flag, int want) {
  const long long t0 = clock64();
  while (*flag < want && clock64() - t0 < 2000000000LL) __nanosleep(1000);
}

__device__ float hash01(int64_t i, uint32_t seed) {
  uint32_t x = uint32_t(i) * 2654435761u ^ uint32_t(i >> 32) * 0x85ebca6bu ^ seed * 0x9e3779b9u;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return float(x >> 8) * (1.0f / 16777216.0f);
}

// Timing inputs (values do not change the work, only keep it finite and away from denormals): q, k, v
// uniform, g = -softplus(x) with x ~ U(-4, 1) (decays exp(g) from 0.27 to 0.98), beta ~ U(0.05, 0.95), S ~
// U(-0.1, 0.1).
enum class Fill { Uniform, Gate };
template <typename T>
__global__ void fill_kernel(T* p, int64_t n, uint32_t seed, float lo, float hi, Fill f) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float x = lo + (hi - lo) * hash01(i, seed);
    if (f == Fill::Gate) x = -log1pf(expf(x));
    p[i] = T(x);
  }
}

// --- Host: buffers, launches -----------------------------------------------------------------------------

template <typename T>
T* device_alloc(int64_t n) {
  T* p = nullptr;
  CK(cudaMalloc(&p, size_t(n) * sizeof(T)));
  return p;
}

// Device memory for the largest configuration, shared by every row (a smaller one uses a prefix).
struct Buffers {
  int max_seqs = 0, max_tokens = 0, max_drafts = 0;
  int64_t head_floats = int64_t(kHeadDim) * kHeadDim, seq_floats = kHeads * head_floats;
  bf16 *q = nullptr, *k = nullptr, *v = nullptr;
  float *g = nullptr, *beta = nullptr, *out = nullptr, *slot = nullptr, *checkpoint = nullptr,
        *per_token = nullptr, *records = nullptr;
  int *n_verify = nullptr, *n_refeed = nullptr, *n_longer = nullptr, *n_commit = nullptr;
  StateCopy *save = nullptr, *restore = nullptr, *select = nullptr;

  Buffers(int seqs, int tokens, int drafts) : max_seqs(seqs), max_tokens(tokens), max_drafts(drafts) {
    const int64_t rows = int64_t(seqs) * tokens * kHeads;
    q = device_alloc<bf16>(rows * kHeadDim), k = device_alloc<bf16>(rows * kHeadDim);
    v = device_alloc<bf16>(rows * kHeadDim);
    g = device_alloc<float>(rows * kHeadDim), beta = device_alloc<float>(rows);
    out = device_alloc<float>(rows * kHeadDim), records = device_alloc<float>(rows * 3 * kHeadDim);
    slot = device_alloc<float>(seqs * seq_floats), checkpoint = device_alloc<float>(seqs * seq_floats);
    per_token = device_alloc<float>(int64_t(seqs) * drafts * seq_floats);
    for (int** a : {&n_verify, &n_refeed, &n_longer, &n_commit}) *a = device_alloc<int>(seqs);
    for (StateCopy** c : {&save, &restore, &select}) *c = device_alloc<StateCopy>(seqs);
  }
  ~Buffers() {
    for (void* p :
         std::initializer_list<void*>{q, k, v, g, beta, out, records, slot, checkpoint, per_token, n_verify,
                                      n_refeed, n_longer, n_commit, save, restore, select})
      cudaFree(p);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  float* slot_of(int s) const { return slot + s * seq_floats; }
  float* checkpoint_of(int s) const { return checkpoint + s * seq_floats; }
  float* per_token_of(int s, int j) const { return per_token + (int64_t(s) * max_drafts + j) * seq_floats; }

  void fill_random(uint32_t seed) {
    const int64_t rows = int64_t(max_seqs) * max_tokens * kHeads;
    const dim3 grid(1024), block(256);
    fill_kernel<bf16><<<grid, block>>>(q, rows * kHeadDim, seed + 1, -1, 1, Fill::Uniform);
    fill_kernel<bf16><<<grid, block>>>(k, rows * kHeadDim, seed + 2, -1, 1, Fill::Uniform);
    fill_kernel<bf16><<<grid, block>>>(v, rows * kHeadDim, seed + 3, -1, 1, Fill::Uniform);
    fill_kernel<float><<<grid, block>>>(g, rows * kHeadDim, seed + 4, -4, 1, Fill::Gate);
    fill_kernel<float><<<grid, block>>>(beta, rows, seed + 5, 0.05f, 0.95f, Fill::Uniform);
    fill_kernel<float><<<grid, block>>>(slot, max_seqs * seq_floats, seed + 6, -0.1f, 0.1f, Fill::Uniform);
    CK(cudaGetLastError());
    // The check left NaN in what it poisons; each strategy writes these before reading them, zeros all the
    // same.
    CK(cudaMemset(checkpoint, 0, size_t(max_seqs * seq_floats) * 4));
    CK(cudaMemset(per_token, 0, size_t(int64_t(max_seqs) * max_drafts * seq_floats) * 4));
    CK(cudaMemset(records, 0, size_t(rows * 3 * kHeadDim) * 4));
    CK(cudaDeviceSynchronize());
  }
};

// One case of one configuration: B sequences, k drafts, each sequence's acceptance a, and what the
// strategies' bookkeeping (kda_rollback.h) makes of it: tokens per kernel and sequence, the copies to issue.
struct Case {
  int n_seqs = 0, k = 0, vb = 32, tok_stride = 0;
  std::vector<int> accepted;
  std::vector<int> verify, refeed, longer, commit;  // tokens per sequence: verify, re-feed, both, fold
  std::vector<StateCopy> save, restore, select;     // checkpoint, restore on a rejection, per-token select

  // Device copies of the arrays (fixed places in `b`), before the timed runs.
  void upload(const Buffers& b) const {
    const size_t n = size_t(n_seqs) * sizeof(int);
    CK(cudaMemcpy(b.n_verify, verify.data(), n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.n_refeed, refeed.data(), n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.n_longer, longer.data(), n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.n_commit, commit.data(), n, cudaMemcpyHostToDevice));
    for (auto [host, dev] :
         {std::pair{&save, b.save}, std::pair{&restore, b.restore}, std::pair{&select, b.select}})
      if (!host->empty())
        CK(cudaMemcpy(dev, host->data(), host->size() * sizeof(StateCopy), cudaMemcpyHostToDevice));
  }
};

Case make_case(const Buffers& b, int n_seqs, int k, std::vector<int> accepted, int vb, int tok_stride) {
  Case c;
  c.n_seqs = n_seqs, c.k = k, c.vb = vb, c.tok_stride = tok_stride, c.accepted = std::move(accepted);
  for (int s = 0; s < n_seqs; ++s) {
    const int a = c.accepted[size_t(s)];
    const CheckpointAction act = checkpoint_action(a, k);
    const PerTokenSource src = per_token_source(a, k);
    c.verify.push_back(verify_tokens(k));
    c.refeed.push_back(act.refeed_tokens);  // 0: the kernel skips the sequence
    c.longer.push_back(verify_tokens(k) + act.refeed_tokens);
    c.commit.push_back(fold_tokens(a));
    c.save.push_back({b.slot_of(s), b.checkpoint_of(s)});
    if (act.restore) c.restore.push_back({b.checkpoint_of(s), b.slot_of(s)});
    if (!src.in_slot) c.select.push_back({b.per_token_of(s, src.buffer), b.slot_of(s)});
  }
  return c;
}

VerifyParams verify_params(const Buffers& b, const Case& c, const int* n_tokens) {
  VerifyParams p{};
  p.q = b.q, p.k = b.k, p.v = b.v, p.g = b.g, p.beta = b.beta, p.n_tokens = n_tokens;
  p.tok_stride = c.tok_stride, p.n_heads = kHeads, p.state = b.slot, p.out = b.out;
  p.checkpoint = b.checkpoint, p.per_token = b.per_token, p.max_drafts = b.max_drafts, p.records = b.records;
  return p;
}

template <class Policy>
void launch_verify(const VerifyParams& p, int n_seqs, int vb, cudaStream_t st) {
  const unsigned grid = unsigned(n_seqs * p.n_heads * (kHeadDim / vb));
  if (vb == 64)
    verify_kernel<Policy, 64><<<grid, kStepThreads, 0, st>>>(p);
  else
    verify_kernel<Policy, 32><<<grid, kStepThreads, 0, st>>>(p);
  CK(cudaGetLastError());
}

void launch_fold(const Buffers& b, const Case& c, cudaStream_t st) {
  if (fold_tokens(c.k) > kMaxFoldTokens) {
    std::fprintf(stderr, "fold: %d records exceed the %d a CTA stages\n", fold_tokens(c.k), kMaxFoldTokens);
    std::exit(2);
  }
  const FoldParams p{b.slot, b.records, b.n_commit, c.tok_stride, kHeads};
  const unsigned grid = unsigned(c.n_seqs * kHeads * (kHeadDim / c.vb));
  if (c.vb == 64)
    fold_kernel<64><<<grid, kStepThreads, 0, st>>>(p);
  else
    fold_kernel<32><<<grid, kStepThreads, 0, st>>>(p);
  CK(cudaGetLastError());
}

void launch_copies(const StateCopy* list, int n, int64_t seq_floats, cudaStream_t st) {
  if (n == 0) return;
  const int64_t n4 = seq_floats / 4;
  copy_states_kernel<<<dim3(unsigned((n4 + 1023) / 1024), unsigned(n)), 256, 0, st>>>(list, n4);
  CK(cudaGetLastError());
}

// As runner::apply_cache_ops issues a slot copy: one cudaMemcpyAsync per sequence and layer.
void memcpy_states(const std::vector<StateCopy>& copies, int64_t seq_floats, cudaStream_t st) {
  for (const StateCopy& c : copies)
    CK(cudaMemcpyAsync(c.dst, c.src, size_t(seq_floats) * sizeof(float), cudaMemcpyDeviceToDevice, st));
}

// The same copies as one cudaMemcpyBatchAsync (CUDA 12.8+): the toolkit's route to one launch per phase.
void batch_memcpy_states(const std::vector<StateCopy>& copies, int64_t seq_floats, cudaStream_t st) {
  if (copies.empty()) return;
  std::vector<void*> dst;
  std::vector<const void*> src;
  const std::vector<size_t> sizes(copies.size(), size_t(seq_floats) * sizeof(float));
  for (const StateCopy& c : copies) dst.push_back(c.dst), src.push_back(c.src);
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t attr_index = 0;
  CK(cudaMemcpyBatchAsync(dst.data(), src.data(), sizes.data(), copies.size(), &attr, &attr_index, 1, st));
}

// The strategies as the lab times them; CheckpointMemcpy is what rill does today.
enum class Variant { CheckpointMemcpy, CheckpointBatch, CheckpointKernel, CheckpointFused, PerToken, Records };
constexpr std::array<Variant, 6> kVariants = {Variant::CheckpointMemcpy, Variant::CheckpointBatch,
                                              Variant::CheckpointKernel, Variant::CheckpointFused,
                                              Variant::PerToken,         Variant::Records};

const char* variant_name(Variant v) {
  switch (v) {
    case Variant::CheckpointMemcpy:
      return "0  checkpoint, memcpy/seq (today)";
    case Variant::CheckpointBatch:
      return "0b checkpoint, one memcpy batch";
    case Variant::CheckpointKernel:
      return "0k checkpoint, copy kernel";
    case Variant::CheckpointFused:
      return "0f checkpoint, fused in verify";
    case Variant::PerToken:
      return "1  per-token states";
    case Variant::Records:
      return "2  replay records + fold";
  }
  return "";
}

const char* short_name(Variant v) {
  switch (v) {
    case Variant::CheckpointMemcpy:
      return "0 today";
    case Variant::CheckpointBatch:
      return "0b";
    case Variant::CheckpointKernel:
      return "0k";
    case Variant::CheckpointFused:
      return "0f";
    case Variant::PerToken:
      return "1 per-tok";
    case Variant::Records:
      return "2 records";
  }
  return "";
}

Strategy strategy_of(Variant v) {
  switch (v) {
    case Variant::CheckpointMemcpy:
    case Variant::CheckpointBatch:
    case Variant::CheckpointKernel:
      return Strategy::Checkpoint;
    case Variant::CheckpointFused:
      return Strategy::CheckpointFused;
    case Variant::PerToken:
      return Strategy::PerToken;
    case Variant::Records:
      return Strategy::Records;
  }
  return Strategy::Checkpoint;
}

bool refeeds(Variant v) {
  return strategy_of(v) == Strategy::Checkpoint || strategy_of(v) == Strategy::CheckpointFused;
}

// A verify step's device work in three phases: before the step, the verify, after acceptance. Empty: none.
struct Phases {
  std::array<std::function<void()>, 3> run;
};

Phases make_phases(Variant v, const Buffers& b, const Case& c, cudaStream_t st) {
  Phases ph;
  const int64_t sf = b.seq_floats;
  const VerifyParams p = verify_params(b, c, b.n_verify);
  switch (v) {
    case Variant::CheckpointMemcpy:
      ph.run[0] = [&c, sf, st] { memcpy_states(c.save, sf, st); };
      ph.run[1] = [p, &c, st] { launch_verify<InPlace>(p, c.n_seqs, c.vb, st); };
      if (!c.restore.empty()) ph.run[2] = [&c, sf, st] { memcpy_states(c.restore, sf, st); };
      break;
    case Variant::CheckpointBatch:
      ph.run[0] = [&c, sf, st] { batch_memcpy_states(c.save, sf, st); };
      ph.run[1] = [p, &c, st] { launch_verify<InPlace>(p, c.n_seqs, c.vb, st); };
      if (!c.restore.empty()) ph.run[2] = [&c, sf, st] { batch_memcpy_states(c.restore, sf, st); };
      break;
    case Variant::CheckpointKernel:
      ph.run[0] = [&b, &c, sf, st] { launch_copies(b.save, c.n_seqs, sf, st); };
      ph.run[1] = [p, &c, st] { launch_verify<InPlace>(p, c.n_seqs, c.vb, st); };
      if (!c.restore.empty())
        ph.run[2] = [&b, &c, sf, st] { launch_copies(b.restore, int(c.restore.size()), sf, st); };
      break;
    case Variant::CheckpointFused:
      ph.run[1] = [p, &c, st] { launch_verify<FusedCheckpoint>(p, c.n_seqs, c.vb, st); };
      if (!c.restore.empty())
        ph.run[2] = [&b, &c, sf, st] { launch_copies(b.restore, int(c.restore.size()), sf, st); };
      break;
    case Variant::PerToken:
      ph.run[1] = [p, &c, st] { launch_verify<PerTokenStates>(p, c.n_seqs, c.vb, st); };
      if (!c.select.empty())
        ph.run[2] = [&b, &c, sf, st] { launch_copies(b.select, int(c.select.size()), sf, st); };
      break;
    case Variant::Records:
      ph.run[1] = [p, &c, st] { launch_verify<ReplayRecords>(p, c.n_seqs, c.vb, st); };
      ph.run[2] = [&b, &c, st] { launch_fold(b, c, st); };
      break;
  }
  return ph;
}

// The next step's re-feed of the committed tokens after a rejection (strategies 0, 0k, 0f), as a verify in
// place over the a + 1 tokens from the restored slot.
void refeed(const Buffers& b, const Case& c, cudaStream_t st) {
  launch_verify<InPlace>(verify_params(b, c, b.n_refeed), c.n_seqs, c.vb, st);
}

// --- Check against the double reference ------------------------------------------------------------------

std::vector<float> fetch(const float* p, int64_t n) {
  std::vector<float> h(static_cast<size_t>(n));
  CK(cudaMemcpy(h.data(), p, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

// Largest |gpu - ref| over the largest |ref| of everything compared.
struct Err {
  double diff = 0, scale = 0;
  void add(float gpu, double ref) {
    diff = std::isfinite(gpu) ? std::max(diff, std::abs(double(gpu) - ref)) : INFINITY;
    scale = std::max(scale, std::abs(ref));
  }
  double value() const { return diff / std::max(scale, 1e-30); }
  bool ok() const { return value() <= kTol; }
};

struct Reference {
  int n_seqs, n_tokens, d;
  std::vector<HeadRun> runs;  // [s][h]
  const HeadRun& run(int s, int h) const { return runs[size_t(s) * kHeads + h]; }
};

// Outputs of tokens 0..n_s - 1 of each sequence against the reference.
Err output_err(const Reference& ref, const std::vector<float>& out, const std::vector<int>& n_of) {
  Err e;
  for (int s = 0; s < ref.n_seqs; ++s)
    for (int t = 0; t < n_of[size_t(s)]; ++t)
      for (int h = 0; h < kHeads; ++h)
        for (int j = 0; j < ref.d; ++j)
          e.add(out[((size_t(s) * ref.n_tokens + t) * kHeads + h) * ref.d + j],
                ref.run(s, h).outputs[size_t(t)][j]);
  return e;
}

// States [n_seqs][heads][d][d] (stride between sequences `seq_stride`) against the reference after token t_s.
Err state_err(const Reference& ref, const float* states, int64_t seq_stride, const std::vector<int>& t_of) {
  Err e;
  for (int s = 0; s < ref.n_seqs; ++s)
    for (int h = 0; h < kHeads; ++h) {
      const State& want = ref.run(s, h).states[size_t(t_of[size_t(s)])];
      const float* got = states + s * seq_stride + int64_t(h) * ref.d * ref.d;
      for (size_t i = 0; i < want.size(); ++i) e.add(got[i], want[i]);
    }
  return e;
}

bool report(const char* what, const Err& e, int k, int vb) {
  if (!e.ok()) std::printf("  k=%d VB=%d %-58s error %.2e > %.0e: FAILED\n", k, vb, what, e.value(), kTol);
  return e.ok();
}

// Every strategy over 3 sequences accepting 0, k/2 and k drafts: outputs of every fed token, the committed
// state of each sequence, and the intermediate states each keeps (per-token buffers, the checkpoint, the slot
// a read-only verify must leave alone).
bool validate(Buffers& b, int k, int vb, uint32_t seed, cudaStream_t st, double* worst) {
  const int B = 3, n = verify_tokens(k), d = kHeadDim;
  const Inputs in = make_inputs(B, n, kHeads, d, seed);
  Reference ref{B, n, d, {}};
  for (int s = 0; s < B; ++s)
    for (int h = 0; h < kHeads; ++h) ref.runs.push_back(run_head(in, s, h, n));
  std::vector<uint16_t> bits(in.q.size());
  for (auto [host, dev] : {std::pair{&in.q, b.q}, std::pair{&in.k, b.k}, std::pair{&in.v, b.v}}) {
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = rill::f32_to_bf16((*host)[i]);
    CK(cudaMemcpy(dev, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
  }
  CK(cudaMemcpy(b.g, in.g.data(), in.g.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b.beta, in.beta.data(), in.beta.size() * 4, cudaMemcpyHostToDevice));

  const Case c = make_case(b, B, k, {0, k / 2, k}, vb, n);
  c.upload(b);
  const std::vector<int> all(B, n), committed = c.accepted;  // state index after token a = a
  const int64_t sf = b.seq_floats;
  bool ok = true;
  std::vector<std::vector<float>> committed_slots;
  for (Variant v : kVariants) {
    const std::string name = variant_name(v);
    CK(cudaMemcpy(b.slot, in.state0.data(), in.state0.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(b.out, 0xff, size_t(B) * n * kHeads * d * 4));  // NaN: an output not written fails
    CK(cudaMemset(b.checkpoint, 0xff, size_t(B) * sf * 4));
    CK(cudaMemset(b.per_token, 0xff, size_t(B) * b.max_drafts * sf * 4));
    const Phases ph = make_phases(v, b, c, st);
    for (int i = 0; i < 2; ++i)
      if (ph.run[size_t(i)]) ph.run[size_t(i)]();
    CK(cudaStreamSynchronize(st));
    Err out = output_err(ref, fetch(b.out, int64_t(B) * n * kHeads * d), all);
    ok &= report((name + ": outputs of the verify").c_str(), out, k, vb);
    *worst = std::max(*worst, out.value());
    const std::vector<float> slot_after_verify = fetch(b.slot, B * sf);
    if (v == Variant::Records)
      ok &= report((name + ": slot untouched by the verify").c_str(),
                   std::memcmp(slot_after_verify.data(), in.state0.data(), in.state0.size() * 4)
                       ? Err{INFINITY, 1}
                       : Err{},
                   k, vb);
    if (strategy_of(v) == Strategy::Checkpoint || v == Variant::CheckpointFused)
      ok &= report((name + ": checkpoint = state before the step").c_str(),
                   std::memcmp(fetch(b.checkpoint, B * sf).data(), in.state0.data(), in.state0.size() * 4)
                       ? Err{INFINITY, 1}
                       : Err{},
                   k, vb);
    if (v == Variant::PerToken) {
      const std::vector<float> pt = fetch(b.per_token, int64_t(B) * b.max_drafts * sf);
      for (int t = 0; t < k; ++t) {
        Err e = state_err(ref, pt.data() + t * sf, b.max_drafts * sf, std::vector<int>(B, t));
        ok &= report((name + ": buffer " + std::to_string(t)).c_str(), e, k, vb);
      }
      ok &= report((name + ": slot after the verify").c_str(),
                   state_err(ref, slot_after_verify.data(), sf, std::vector<int>(B, k)), k, vb);
    }
    // The records alone, folded on the host: pins a failure on the verify or on the fold.
    if (v == Variant::Records) {
      const std::vector<float> rec = fetch(b.records, int64_t(B) * n * kHeads * 3 * d);
      Err e;
      for (int s = 0; s < B; ++s)
        for (int h = 0; h < kHeads; ++h) {
          State S = initial_state(in, s, h);
          for (int t = 0; t < fold_tokens(c.accepted[size_t(s)]); ++t) {
            const float* r = rec.data() + ((size_t(s) * n + t) * kHeads + h) * 3 * d;
            fold(S, d, Record{{r, r + d}, {r + d, r + 2 * d}, {r + 2 * d, r + 3 * d}});
          }
          const State& want = ref.run(s, h).states[size_t(committed[size_t(s)])];
          for (size_t i = 0; i < want.size(); ++i) e.add(float(S[i]), want[i]);
        }
      ok &= report((name + ": GPU records folded on the host").c_str(), e, k, vb);
    }
    if (ph.run[2]) ph.run[2]();
    if (refeeds(v)) refeed(b, c, st);
    CK(cudaStreamSynchronize(st));
    const std::vector<float> slot = fetch(b.slot, B * sf);
    Err e = state_err(ref, slot.data(), sf, committed);
    ok &= report((name + ": committed state (a = 0, k/2, k)").c_str(), e, k, vb);
    *worst = std::max(*worst, e.value());
    if (refeeds(v)) {  // the re-fed tokens' outputs, written again over the verify's
      std::vector<int> n_of(B, n);
      ok &= report((name + ": outputs after the re-feed").c_str(),
                   output_err(ref, fetch(b.out, int64_t(B) * n * kHeads * d), n_of), k, vb);
    }
    committed_slots.push_back(slot);
  }
  // Not required, but telling: with (beta k̂) e formed the same way everywhere, every strategy commits the
  // same bits (the fold repeats the verify's roundings, the re-feed repeats the verify).
  bool identical = true;
  for (const auto& s : committed_slots)
    identical &= std::memcmp(s.data(), committed_slots[0].data(), s.size() * 4) == 0;
  std::printf("  k=%d VB=%d: %s; committed states of all strategies %s\n", k, vb, ok ? "ok" : "FAILED",
              identical ? "bit-identical" : "differ in the last bits");
  return ok;
}

// --- Timing ----------------------------------------------------------------------------------------------

struct Timing {
  std::array<double, 3> phase_us{};  // medians per phase
  double total_us = 0;               // median of the per-sample sums
  double host_issue_us = 0;          // median host time to issue the sample's work
};

class Timer {
 public:
  Timer(cudaStream_t st, int reps) : st_(st), reps_(reps) {
    flush_n_ = (int64_t(256) << 20) / 16;
    flush_ = device_alloc<float4>(flush_n_);
    CK(cudaMemset(flush_, 0, size_t(flush_n_) * 16));
    sink_ = device_alloc<float>(1);
    CK(cudaHostAlloc(reinterpret_cast<void**>(&flag_), sizeof(int), cudaHostAllocMapped));
    *flag_ = 0;
    CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&flag_dev_), flag_, 0));
    for (auto& e : ev_) CK(cudaEventCreate(&e));
    // Load both kernels now: with lazy loading, loading a kernel while the gate spins can wait for the gate.
    // (The strategies' kernels were loaded by the check.)
    gate_kernel<<<1, 1, 0, st_>>>(flag_dev_, 0);
    flush_kernel<<<1024, 256, 0, st_>>>(flush_, flush_n_, sink_);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(st_));
  }
  ~Timer() {
    for (auto& e : ev_) cudaEventDestroy(e);
    cudaFreeHost(flag_);
    cudaFree(flush_);
    cudaFree(sink_);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  Timing run(const Phases& ph, int reps = -1, int warm = 3) {
    if (reps < 0) reps = reps_;
    std::array<std::vector<double>, 3> per_phase;
    std::vector<double> totals, host;
    for (int i = 0; i < warm + reps; ++i) {
      gate_kernel<<<1, 1, 0, st_>>>(flag_dev_, ++gate_);
      CK(cudaGetLastError());
      double issue = 0;
      for (size_t p = 0; p < 3; ++p) {
        if (!ph.run[p]) continue;
        flush_kernel<<<1024, 256, 0, st_>>>(flush_, flush_n_, sink_);
        CK(cudaEventRecord(ev_[2 * p], st_));
        const auto t0 = std::chrono::steady_clock::now();
        ph.run[p]();
        issue += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        CK(cudaEventRecord(ev_[2 * p + 1], st_));
      }
      *reinterpret_cast<volatile int*>(flag_) = gate_;  // everything is queued: let the stream go
      CK(cudaStreamSynchronize(st_));
      if (i < warm) continue;
      double sum = 0;
      for (size_t p = 0; p < 3; ++p) {
        float ms = 0;
        if (ph.run[p]) CK(cudaEventElapsedTime(&ms, ev_[2 * p], ev_[2 * p + 1]));
        per_phase[p].push_back(1e3 * ms);
        sum += 1e3 * ms;
      }
      totals.push_back(sum);
      host.push_back(issue);
    }
    Timing t;
    for (size_t p = 0; p < 3; ++p) t.phase_us[p] = median(per_phase[p]);
    t.total_us = median(totals);
    t.host_issue_us = median(host);
    return t;
  }

 private:
  static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
  }
  cudaStream_t st_;
  int reps_;
  float4* flush_ = nullptr;
  int64_t flush_n_ = 0;
  float* sink_ = nullptr;
  int* flag_ = nullptr;  // mapped host memory the gate kernel polls
  int* flag_dev_ = nullptr;
  int gate_ = 0;
  std::array<cudaEvent_t, 6> ev_{};
};

double measure_copy_gbps(Timer& timer, cudaStream_t st, bool quick) {
  const size_t bytes = size_t(quick ? 512 : 1024) << 20;
  float* src = device_alloc<float>(int64_t(bytes / 4));
  float* dst = device_alloc<float>(int64_t(bytes / 4));
  CK(cudaMemset(src, 0x3c, bytes));
  Phases ph;
  ph.run[1] = [=] { CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st)); };
  const double us = timer.run(ph, 9, 2).total_us;
  CK(cudaFree(src));
  CK(cudaFree(dst));
  return 2.0 * double(bytes) / (us * 1e-6) / 1e9;
}

struct RowKey {
  int n_seqs, k;
  bool reject;
  int variant;  // index into kVariants; kVariants.size(): the re-feed row
  bool operator<(const RowKey& o) const {
    return std::tie(n_seqs, k, reject, variant) < std::tie(o.n_seqs, o.k, o.reject, o.variant);
  }
};

void print_row(const char* name, const char* what, const Case& c, const Timing& t, double bytes,
               double copy_gbps, double added_mib, const std::string& note) {
  const double gbps = bytes / (t.total_us * 1e-6) / 1e9;
  std::printf("%3d %2d  %-34s %-11s %7.1f %7.1f %7.1f %8.1f %8.3f %8.2f %6.0f %5.1f%% %8.1f  %s\n", c.n_seqs,
              c.k, name, what, t.phase_us[0], t.phase_us[1], t.phase_us[2], t.total_us,
              20 * t.total_us * 1e-3, bytes / 1e6, gbps, 100.0 * gbps / copy_gbps, added_mib, note.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int reps = 31;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
      reps = 15;
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::max(15, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: kda_rollback_bench [--quick] [--reps N (>= 15)]\n");
      return 2;
    }
  }
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::printf("kda_rollback_bench: no usable CUDA GPU, nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "kda_rollback_bench: %s, %d SMs; KDA %d heads x %d, fp32 state %.0f MiB per sequence and layer\n",
      prop.name, prop.multiProcessorCount, kHeads, kHeadDim, state_bytes(Shape{}) / (1 << 20));

  const std::vector<int> batches = {1, 8, 64}, drafts = {1, 2, 4, 8};
  const int max_k = 8;
  Buffers b(64, 2 * max_k + 2, max_k);  // tokens: k + 1 verified + up to k re-fed (the re-feed row)
  // A blocking stream: the check's cudaMemcpy and cudaMemset on the default stream are ordered with it.
  cudaStream_t st;
  CK(cudaStreamCreate(&st));

  std::printf(
      "check against the double reference (3 sequences accepting 0, k/2, k drafts; tolerance %.0e):\n", kTol);
  bool ok = true;
  double worst = 0;
  for (int k : drafts)
    for (int vb : {32, 64}) ok &= validate(b, k, vb, 1000u + uint32_t(k), st, &worst);
  std::printf("check: %s (largest error %.2e)\n\n", ok ? "ok" : "FAILED", worst);
  if (!ok) return 1;

  Timer timer(st, reps);
  const double copy_gbps = measure_copy_gbps(timer, st, quick);
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", copy_gbps);
  b.fill_random(7);

  const Shape shape;
  std::printf(
      "\ntimes in us per layer (phases: before the step | verify | after acceptance), x20 = 20 KDA layers in "
      "ms; MB and GB/s per layer; +MiB = memory added per sequence at 20 layers; median of %d\n",
      reps);
  std::printf("%3s %2s  %-34s %-11s %7s %7s %7s %8s %8s %8s %6s %6s %8s\n", "B", "k", "strategy", "case",
              "before", "verify", "after", "total", "x20 ms", "MB", "GB/s", "%copy", "+MiB");
  std::map<RowKey, double> total_us;
  for (int B : batches) {
    const int vb = B * kHeads >= 4 * prop.multiProcessorCount ? 64 : 32;  // recurrent_step.cu's rule
    for (int k : drafts) {
      for (bool reject : {false, true}) {
        const int a = reject ? k / 2 : k;
        const Case c = make_case(b, B, k, std::vector<int>(size_t(B), a), vb, 2 * k + 2);
        c.upload(b);
        char case_name[32];
        if (reject)
          std::snprintf(case_name, sizeof case_name, "a=%d of %d", a, k);
        else
          std::snprintf(case_name, sizeof case_name, "a=%d (all)", a);
        for (size_t i = 0; i < kVariants.size(); ++i) {
          const Variant v = kVariants[i];
          const Timing t = timer.run(make_phases(v, b, c, st));
          const double bytes = B * traffic(strategy_of(v), shape, k, a).total();
          std::string note;
          if (v == Variant::CheckpointMemcpy)
            note = "host: " + std::to_string(int(std::lround(t.host_issue_us))) +
                   " us to issue (not in the time)";
          print_row(variant_name(v), case_name, c, t, bytes, copy_gbps,
                    added_memory(strategy_of(v), shape, k) / (1 << 20), note);
          total_us[{B, k, reject, int(i)}] = t.total_us;
        }
        if (reject) {  // what the re-feed adds to the next step's verify: a + 1 more tokens through the state
          Phases longer, plain;
          longer.run[1] = [&] { launch_verify<InPlace>(verify_params(b, c, b.n_longer), B, vb, st); };
          plain.run[1] = [&] { launch_verify<InPlace>(verify_params(b, c, b.n_verify), B, vb, st); };
          Timing t = timer.run(longer);
          const Timing t_plain = timer.run(plain);
          t.phase_us = {0, t.total_us - t_plain.total_us, 0};
          t.total_us -= t_plain.total_us;
          print_row("0r re-feed (next step, marginal)", case_name, c, t, B * refeed_bytes(shape, a, k),
                    copy_gbps, 0,
                    "verify of k+1+a+1 tokens minus k+1; the model's other layers re-run them too");
          total_us[{B, k, true, int(kVariants.size())}] = t.total_us;
        }
      }
    }
  }

  std::printf("\nmemory added per sequence at 20 KDA layers (beside the 40 MiB state), MiB:\n");
  std::printf("  %-4s %12s %12s %12s\n", "k", "checkpoint", "per-token", "records");
  for (int k : drafts)
    std::printf("  %-4d %12.1f %12.1f %12.2f\n", k, added_memory(Strategy::Checkpoint, shape, k) / (1 << 20),
                added_memory(Strategy::PerToken, shape, k) / (1 << 20),
                added_memory(Strategy::Records, shape, k) / (1 << 20));

  // Checkpoint strategies pay the re-feed in the next step on a rejection: counted here (KDA only).
  std::printf(
      "\nverdict, k = 4: ms per verify step over 20 KDA layers, rollback included (checkpoint rows on a "
      "rejection + the re-feed's marginal verify cost)\n");
  std::printf("  %-3s %-11s", "B", "case");
  for (Variant v : kVariants) std::printf(" %9s", short_name(v));
  std::printf("  fastest\n");
  const int kv = 4;
  for (int B : {1, 64})
    for (bool reject : {false, true}) {
      std::printf("  %-3d %-11s", B, reject ? "reject a=2" : "accept all");
      double best = INFINITY;
      std::string best_name;
      for (size_t i = 0; i < kVariants.size(); ++i) {
        double us = total_us[{B, kv, reject, int(i)}];
        if (reject && refeeds(kVariants[i])) us += total_us[{B, kv, true, int(kVariants.size())}];
        std::printf(" %9.3f", 20 * us * 1e-3);
        if (us < best) best = us, best_name = variant_name(kVariants[i]);
      }
      std::printf("  %s\n", best_name.c_str());
    }
  std::printf(
      "  not counted: rill's checkpoint also copies the conv windows (72 KiB per layer and sequence); a "
      "re-feed\n"
      "  re-runs the a + 1 tokens through every other layer too; per-token states pointing the slot at "
      "buffer a\n"
      "  (an index, no select copy) need k + 1 slots per sequence; 0's host time to issue its copies "
      "(rows).\n");
  CK(cudaStreamDestroy(st));
  return 0;
}
