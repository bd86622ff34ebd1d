// Backend: the coarse ops the model is written against (design.md §4, style.md §7.1). The CPU backend is
// the fp32 reference; the CUDA backend is the fast path. Public methods check shapes and dtypes once and
// call the private virtual *_impl the backends override. Callers own every output (views carved from the
// step workspace); ops never allocate. Numerics follow spec/kimi-architecture.md §3 and §7.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/batch_layout.h"
#include "core/arena.h"
#include "core/status.h"
#include "core/tensor.h"

namespace rill::backend {

enum class WeightFormat : uint8_t { Dense, Mxfp4, Fp8 };
enum class Activation : uint8_t { Silu, Situ };

// FP8 weights (WeightFormat::Fp8): E4M3 codes times one F32 scale per block of `rows` x `cols` weights, value =
// code * scale (DeepSeek-V3's `weight_scale_inv`: 128 x 128; per-channel scales: 1 x the whole row). Weight-only:
// activations stay in the activation dtype.
struct Fp8Blocks {
  int32_t rows = 0, cols = 0;
  static constexpr int32_t kWholeRow = 1 << 30;  // cols of per-channel scales: one block spans any row
  int64_t scale_rows(int64_t out) const { return (out + rows - 1) / rows; }
  int64_t scale_cols(int64_t in) const { return cols >= in ? 1 : (in + cols - 1) / cols; }
  bool operator==(const Fp8Blocks& o) const { return rows == o.rows && cols == o.cols; }  // .cu files are C++17
};

// A linear layer's weight, y = x W^T.
struct LinearWeight {
  TensorView weight;  // Dense: [out, in] BF16/F16/F32. Mxfp4: U8 [out, in/2], low nibble = even column.
                      // Fp8: F8E4M3 [out, in]
  TensorView scales;  // Mxfp4: U8 E8M0 [out, in/32]. Fp8: F32 [block.scale_rows(out), block.scale_cols(in)]
  WeightFormat format = WeightFormat::Dense;
  Fp8Blocks block;  // Fp8 only
  int64_t out_features() const { return weight.size(0); }
  int64_t in_features() const { return format == WeightFormat::Mxfp4 ? weight.size(1) * 2 : weight.size(1); }
};

// All routed experts of one MoE layer, stacked so expert e's rows are at a fixed stride.
struct ExpertWeights {
  TensorView gate_up;                      // [E, 2I, Hx]: rows [0, I) = gate (w1), rows [I, 2I) = up (w3)
  TensorView down;                         // [E, Hx, I] (w2)
  TensorView gate_up_scales, down_scales;  // Mxfp4: [E, 2I, Hx/32], [E, Hx, I/32]. Fp8: F32 [E, 2I/block.rows,
                                           // block.scale_cols(Hx)], [E, block.scale_rows(Hx), block.scale_cols(I)]
  WeightFormat format = WeightFormat::Dense;
  Fp8Blocks block;  // Fp8 only; block.rows divides I, so gate and up never share a block
  int n_experts() const { return int(gate_up.size(0)); }
  int intermediate() const { return int(gate_up.size(1) / 2); }
  int width() const { return int(down.size(1)); }  // Hx: hidden (or K3 latent) width
};

// Per-row sampling controls for Backend::sample (one row per sequence that needs a token).
struct SamplingRow {
  float temperature = 0.0f;  // <= 0: greedy
  float top_p = 1.0f;
  float min_p = 0.0f;
  int32_t top_k = 0;  // 0: all
  uint64_t seed = 0;
  uint64_t counter = 0;  // advances per generated token so each step draws a fresh number
};

struct EmbedArgs {
  TensorView table;  // [V, H] weight dtype
  TensorView ids;    // I32 [T]
  TensorView out;    // act or F32 [T, H]
};

// KimiRMSNorm (spec §3.0): y = x * rsqrt(mean(x^2) + eps) in fp32, rounded to the activation dtype, times w.
struct RmsNormArgs {
  TensorView x;       // act or F32 [T, N] (rows may be strided)
  TensorView weight;  // F32 [N]
  float eps = 1e-5f;
  TensorView out;  // act [T, N]
};

// residual += delta (rounded to act), then out = RmsNorm(residual): the pre-norm decoder's join point.
struct AddRmsNormArgs {
  TensorView residual;  // act or F32 [T, H] (the residual stream), updated in place
  TensorView delta;     // act [T, H]
  TensorView weight;    // F32 [H]
  float eps = 1e-5f;
  TensorView out;  // act [T, H]
};

struct GemmArgs {
  TensorView x;                     // act [M, K] (rows may be strided)
  const LinearWeight* w = nullptr;  // [N, K]
  TensorView out;                   // act or F32 [M, N] (rows may be strided)
  // Optional: scratch for backends that stage the weight (CUDA: an FP8 weight's bf16 copy at prefill-sized M,
  // gemm_scratch_bytes). Without it such a backend takes its scratch-free path.
  Arena* scratch = nullptr;
};

// Independent GEMMs issued as one op (the KDA input projections of a decode step): each part as
// Backend::gemm; a backend may run them in one launch. At most kMaxGemmGroup parts.
// `norm` (optional, the op's input norm): the add_rms_norm that produces the parts' input — every part's x is
// norm->out — run before the GEMMs. A backend may fold it into them (gemm_group_fuses_norm: CUDA's decode
// GEMVs); Backend::gemm_group otherwise runs it as add_rms_norm first. Either way residual, out and the GEMM
// outputs are what add_rms_norm then the GEMMs give.
inline constexpr int kMaxGemmGroup = 8;
struct GemmGroupArgs {
  std::vector<GemmArgs> parts;
  const AddRmsNormArgs* norm = nullptr;
};

// out = act(gate) * up in fp32, stored in the activation dtype. Situ: beta*tanh(g/beta)*sigmoid(g) *
// linear_beta*tanh(u/linear_beta) (spec §3.6).
struct GluArgs {
  TensorView gate, up;  // act [M, I] (may be halves of one [M, 2I] buffer)
  TensorView out;       // act [M, I]
  Activation activation = Activation::Silu;
  float beta = 0.0f, linear_beta = 0.0f;
};

struct AddArgs {
  TensorView inout;  // act or F32 [M, N] (an fp32 running sum: exact fp32 addition)
  TensorView x;      // act [M, N]
};

// inout = inout * sigmoid(gate), elementwise in the activation dtype (K3's MLA output gate).
struct SigmoidGateArgs {
  TensorView inout, gate;  // act [M, N]
};

// Short causal conv + SiLU on q|k|v with the per-slot conv window, the forget gate, beta (spec §3.3 1-4).
// A sequence with start_pos == 0 starts from a zero window, whatever its slot holds. The layout's in-step
// snapshot requests (BatchLayout::kda_snapshots) get their conv windows here: the K-1 pre-conv rows before
// each request's position, written into its slot as the step's own window is (kda_attention writes the state).
struct KdaPrepareArgs {
  TensorView qkv;          // act [T, 3P]: pre-conv projections q | k | v
  TensorView conv_weight;  // F32 [3P, K]: tap K-1 multiplies the current token
  TensorView conv_state;   // act [n_slots, K-1, 3P]: last K-1 pre-conv inputs (read, then updated; snapshot
                           // slots written)
  TensorView graw;         // act [T, P]: forget-gate projection f_b(f_a(u)) (K3: the same pair)
  TensorView braw;         // act [T, Hk]: b_proj(u)
  TensorView a_log;        // F32 [Hk]
  TensorView dt_bias;      // F32 [P]
  std::optional<float> gate_lower_bound;  // K3 bounded gate; unset = Kimi Linear softplus gate
  int n_heads = 0, head_dim = 0;          // Hk, d (P = Hk * d)
  const BatchLayout* layout = nullptr;
  TensorView q, k, v;  // act [T, Hk, d]: conv + SiLU outputs (not yet L2-normalised)
  TensorView g;        // F32 [T, Hk, d]: log-decay
  TensorView beta;     // F32 [T, Hk]
  // Replay records (speculative decoding, kda_rollback "records"): act [n_record_slots, R, 3P]. A sequence
  // the layout marks (BatchLayout::seq_kda_records) has its new pre-conv rows copied to row j = 0..n_new-1 of
  // its slot's entry and its conv window left as it was (kda_fold moves it on). Required when a sequence is
  // marked; R >= its n_new.
  TensorView conv_records;
};

// The gated delta rule over each sequence's new tokens (spec §3.3 5-6): L2-normalises q and k (eps 1e-6 on
// the sum of squares), scales q by d^-1/2, and runs the chunked algorithm (chunk 64) for multi-token input or
// the recurrent step for one token, starting from the slot's state (zero when start_pos == 0).
struct KdaAttentionArgs {
  TensorView q, k, v;  // act [T, Hk, d]
  TensorView g;        // F32 [T, Hk, d]
  TensorView beta;     // F32 [T, Hk]
  TensorView state;    // F32 [n_slots, Hk, d_k, d_v] (read, then updated)
  const BatchLayout* layout = nullptr;
  TensorView out;  // act [T, Hk, d]
  Arena* scratch = nullptr;
  // Replay records (speculative decoding, kda_rollback "records"): F32 [n_record_slots, R, Hk, 3, d_k] with
  // d_v == d_k. A sequence the layout marks (BatchLayout::seq_kda_records; start_pos > 0, no in-step
  // snapshots, n_new <= R) runs the recurrence from its slot's state as usual but leaves the slot as it was
  // and writes, for its new token j and head h, entry [slot][j][h] = (beta k̂, alpha = exp(g), e), e = v -
  // (diag(alpha) S)^T k̂ the delta rule's correction: what kda_fold needs to repeat the update
  // S = diag(alpha) S + (beta k̂) e^T bit for bit. Required when a sequence is marked.
  TensorView records;
};

// Commits speculative decoding's replay records (KdaAttentionArgs::records, KdaPrepareArgs::conv_records):
// for each i with n_tokens[i] = a > 0, slot s = slots[i]: the state of every head is folded through records
// [s][0 .. a) in order, S = diag(alpha) S + (beta k̂) e^T, with the same roundings as the verify step that
// wrote them (so it equals the state that step computed after its a-th token, bit for bit), and the conv
// window becomes the last K-1 rows of [window | conv_records[s][0 .. a)]. n_tokens[i] == 0: nothing. The
// counts and slots are device arrays, so a replayed graph can fold whatever the step accepted.
struct KdaFoldArgs {
  TensorView records;       // F32 [n_record_slots, R, Hk, 3, d]
  TensorView conv_records;  // act [n_record_slots, R, 3P]
  TensorView state;         // F32 [n_slots, Hk, d, d] (updated)
  TensorView conv_state;    // act [n_slots, K-1, 3P] (updated)
  TensorView slots;         // I32 [n]: state slots, distinct, each < n_record_slots
  TensorView n_tokens;      // I32 [n]: records to fold, in [0, R]
};

// Gated RMSNorm (spec §3.0): per token and head, fp32 y = o * rsqrt(mean(o^2)+eps) * w * sigmoid(gate).
struct KdaOutputArgs {
  TensorView o;       // act [T, Hk, d]
  TensorView gate;    // act [T, Hk * d]
  TensorView weight;  // F32 [d], shared by all heads
  float eps = 1e-5f;
  TensorView out;  // act [T, Hk * d]
};

// One KDA layer's decode step after its input projections, when every sequence brings one token: the
// low-rank second halves (graw = f_b(fa), gate = g_b(ga) unless the gate is given), kda_prepare,
// kda_attention's recurrent step and kda_output, as one op. Only backends that fuse it implement it; the
// separate ops are its oracle.
struct KdaDecodeArgs {
  TensorView qkv;                     // act [T, 3P]: pre-conv q | k | v
  TensorView fa;                      // act [T, d]: f_a(u)
  const LinearWeight* f_b = nullptr;  // [P, d]
  TensorView ga;                      // act [T, d]: g_a(u) when g_b is set
  const LinearWeight* g_b = nullptr;  // [P, d]; null: `gate` holds the output gate (K3's full-rank g_proj)
  TensorView gate;                    // act [T, P] when g_b is null
  TensorView braw;                    // act [T, Hk]
  TensorView conv_weight;             // F32 [3P, K]
  TensorView conv_state;              // act [n_slots, K-1, 3P] (read, then updated)
  TensorView a_log;                   // F32 [Hk]
  TensorView dt_bias;                 // F32 [P]
  std::optional<float> gate_lower_bound;
  TensorView state;   // F32 [n_slots, Hk, d, d] (read, then updated; zero at start_pos == 0)
  TensorView o_norm;  // F32 [d]
  float eps = 1e-5f;
  int n_heads = 0, head_dim = 0;
  const BatchLayout* layout = nullptr;  // every sequence has exactly one new token
  TensorView out;                       // act [T, P]: the gated, normed output (o_proj's input)
};

// Writes each new token's latent [RmsNorm(c) ; k_pe] into the paged MLA cache at its position.
struct MlaCacheWriteArgs {
  TensorView ckv;          // act [T, kv_lora + rope]: kv_a_proj_with_mqa output
  TensorView norm_weight;  // F32 [kv_lora]
  float eps = 1e-6f;
  TensorView cache;  // act [n_blocks, block_size, kv_lora + rope]
  const BatchLayout* layout = nullptr;
};

// Causal latent attention of each new token over its sequence's cached positions [0, pos] (NoPE, spec §3.4).
struct MlaAttentionArgs {
  TensorView q;      // act [T, n_heads, nope + rope]
  TensorView cache;  // act [n_blocks, block_size, kv_lora + rope], this step already written
  const LinearWeight* kv_b = nullptr;  // [n_heads * (nope + v), kv_lora]
  int n_heads = 0, nope = 0, rope = 0, v_dim = 0, kv_lora = 0;
  float scale = 0.0f;  // (nope + rope)^-1/2
  const BatchLayout* layout = nullptr;
  TensorView out;  // act [T, n_heads * v]
  Arena* scratch = nullptr;
};

// Router (spec §3.5): fp32 logits, sigmoid (or softmax), bias for selection only, grouped top-k, weights from
// the unbiased scores, optional renormalisation (+1e-20), times the routed scaling factor.
struct MoeRouteArgs {
  TensorView x;            // act [T, H]
  TensorView gate_weight;  // [E, H] weight dtype
  TensorView bias;         // F32 [E] (e_score_correction_bias) or empty
  int top_k = 0, n_groups = 1, topk_group = 1;
  bool renormalize = true;
  bool softmax = false;
  float scaling = 1.0f;
  TensorView ids;      // I32 [T, top_k]
  TensorView weights;  // F32 [T, top_k]
  // Expert parallelism: with n_local > 0 this rank holds experts [expert_begin, expert_begin + n_local), and
  // ids are written as local indices (id - expert_begin), -1 for an expert held elsewhere (skipped by
  // moe_experts). The selection and the weights are the same on every rank.
  int expert_begin = 0, n_local = 0;
  // Optional input norm producing x (x is norm->out), as GemmGroupArgs::norm (moe_route_fuses_norm).
  const AddRmsNormArgs* norm = nullptr;
};

// out = sum_k weights[t,k] * Expert_{ids[t,k]}(x_t), accumulated in fp32, stored in the activation dtype; a pair
// whose id is outside [0, E) (an expert held by another rank) contributes nothing.
// With a shared expert (both shared_* set): out = act(act(routed) + act(Shared(x_t))), Shared the dense GLU
// MLP down(act(glu(act(gate x), act(up x)))) — exactly gemm, glu, gemm and add in sequence, which is what a
// backend that does not fuse it runs (Backend::moe_experts); CUDA's decode GEMVs take it as one more expert.
struct MoeExpertsArgs {
  TensorView x;        // act [T, Hx]
  TensorView ids;      // I32 [T, top_k]
  TensorView weights;  // F32 [T, top_k]
  const ExpertWeights* experts = nullptr;
  Activation activation = Activation::Silu;
  float beta = 0.0f, linear_beta = 0.0f;
  TensorView out;  // act [T, Hx]
  Arena* scratch = nullptr;
  const LinearWeight* shared_gate_up = nullptr;  // [2 Is, Hx]: rows [0, Is) gate, [Is, 2 Is) up
  const LinearWeight* shared_down = nullptr;     // [Hx, Is]
};

// K3 Block Attention Residuals depth mix (spec §3.9), per token and all in fp32: candidate j's logit is
// z_j = rsqrt(mean(V_j^2) + eps) * sum_c V_j[c] * norm[c] * proj[c] (a weightless RMSNorm key against the
// pseudo-query norm * proj), p = softmax_j(z), out = sum_j p_j * V_j over the raw candidates.
struct AttnResMixArgs {
  TensorView candidates;  // act or F32 [N, T, H]: the block snapshots in order, then the partial sum (N >= 1)
  TensorView norm_weight;  // F32 [H]: *_res_norm.weight
  TensorView proj_weight;  // F32 [H]: *_res_proj.weight (stored [1, H])
  float eps = 1e-5f;
  TensorView out;  // act or F32 [T, H]
};

struct GatherRowsArgs {
  TensorView x;     // [T, N]
  TensorView rows;  // I32 [R]
  TensorView out;   // [R, N]
};

struct SampleArgs {
  TensorView logits;                  // F32 [R, V]
  const SamplingRow* rows = nullptr;  // [R], in device memory
  TensorView out_ids;                 // I32 [R], device
  Arena* scratch = nullptr;
  // Every row greedy (temperature <= 0 or top_k == 1), known on the host: the GPU then skips the sort.
  bool all_greedy = false;
};

// Repetition, frequency and presence penalties on raw logits (vLLM order: repetition over prompt and output
// tokens — positive logits divided, negative multiplied — then frequency x count and presence over output).
struct PenaltyArgs {
  TensorView logits;  // F32 [R, V], updated in place
  const int32_t* row_offsets =
      nullptr;                      // [R + 1] device: row r's tokens are [row_offsets[r], row_offsets[r+1])
  const int32_t* tokens = nullptr;  // [row_offsets[R]] device: distinct token ids seen by the row
  const int32_t* output_counts =
      nullptr;                       // [row_offsets[R]] device: occurrences in the output (0: prompt only)
  const float* penalties = nullptr;  // [R, 3] device: presence, frequency, repetition
};

// Grammar-constrained decoding: every logit whose bit is clear becomes -inf (row r, token t: bit t % 32 of
// mask[r * words_per_row + t / 32]). Rows that are not constrained carry all-ones words.
struct TokenMaskArgs {
  TensorView logits;               // F32 [R, V], updated in place
  const uint32_t* mask = nullptr;  // [R, words_per_row] device
  int64_t words_per_row = 0;       // >= ceil(V / 32)
};

// Which rows hold a NaN or infinite logit (a broken forward: the row must not be sampled, masked or not).
// Run on the raw logits, before penalties and masks write -inf into them.
struct NonfiniteRowsArgs {
  TensorView logits;  // F32 [R, V]
  TensorView out;     // I32 [R]: 1 where row r holds a non-finite logit, else 0
};

// Log-softmax of the raw logits at the sampled token and the top_n most likely tokens (best first; ties by
// lower id).
struct LogprobsArgs {
  TensorView logits;            // F32 [R, V]
  TensorView sampled;           // I32 [R]
  int top_n = 0;                // 0..20
  TensorView out_logprob;       // F32 [R]
  TensorView out_top_ids;       // I32 [R, top_n] (empty when top_n == 0)
  TensorView out_top_logprobs;  // F32 [R, top_n]
};

// `--quantization fp8` at load (issue #35), on the backend that will hold the weight: per block of
// block.rows x block.cols values scale = amax / 448 (1 for an all-zero block), code = E4M3 of value / scale
// rounded to nearest even and saturated at +-448 (DeepSeek-V3's recipe; core/dtype.h f32_to_f8e4m3 is the
// definition, the CPU backend its reference).
struct QuantizeFp8Args {
  TensorView src;     // BF16, F16 or F32 [rows, cols], rows contiguous
  TensorView codes;   // F8E4M3 (or U8) [rows, cols], rows contiguous
  TensorView scales;  // F32 [block.scale_rows(rows), block.scale_cols(cols)], row-major
  Fp8Blocks block;
};

// One device-to-device copy of a batch (runner::apply_cache_ops: KDA state slots, every layer at once).
struct DeviceCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

// One copy between device memory and the prefix cache's host tier (runner::apply_cache_ops: MLA blocks and KDA
// snapshots moved to host memory and back, issue #38).
struct HostCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
  bool to_host = true;  // device -> host; false: host -> device
};

// What the host tier's copies (Backend::copy_host_tier_batch) have moved and how long they ran, for
// benchmarks: the tier's copy bandwidth beside the pinned-copy ceiling (rill bench --multi-turn).
struct HostTierCopyTotals {
  uint64_t bytes_to_host = 0, bytes_to_device = 0, batches = 0;
  double seconds = 0;
};

// MemAvailable of /proc/meminfo; nullopt where unknown.
std::optional<size_t> host_available_memory();

// One host-to-device copy of a bulk upload (weight loading).
struct CopyJob {
  void* dst = nullptr;        // device
  const void* src = nullptr;  // host (often an mmap'd checkpoint file)
  size_t bytes = 0;
  int group = 0;  // jobs of one group (a shard file) are streamed in order by one worker
};

// Memory owned by a backend: released when the last handle goes.
class DeviceAllocation {
 public:
  DeviceAllocation() = default;
  DeviceAllocation(void* ptr, size_t size, std::shared_ptr<void> owner)
      : ptr_(ptr), size_(size), owner_(std::move(owner)) {}
  void* data() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<void> owner_;
};

// The model shapes a backend's kernels are built for, checked against a config when a model is built so an
// unsupported shape is refused at load, naming the config field, rather than at the first step. 0: any value.
struct KernelShapeLimits {
  int kda_head_dim = 0;                                        // linear_attn_config.head_dim
  int kda_conv_kernel = 0;                                     // linear_attn_config.short_conv_kernel_size
  int mla_nope = 0, mla_rope = 0, mla_v = 0, mla_kv_lora = 0;  // qk_nope/qk_rope/v_head_dim, kv_lora_rank
  int max_experts = 0;                                         // num_experts
  int max_groups = 0;               // num_expert_group, when grouped routing is active
  int max_attn_res_candidates = 0;  // K3: AttnRes blocks + 1
};

// Device work recorded once and replayed as one launch (a CUDA graph): the same kernels with the same
// arguments, reading whatever the fixed buffers they point at hold when it is replayed.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  virtual Status replay() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;  // "cpu", "cuda:N"
  // For the start-up log: the device in words (the CPU's hardware threads; the GPU's name and memory).
  virtual std::string device_description() const;
  virtual Device device() const = 0;
  // Makes the calling thread's device calls go to this backend's device (CUDA: cudaSetDevice). The thread
  // that creates a backend is bound; any other thread that runs ops (the engine's) calls this first.
  virtual Status bind_thread() { return {}; }
  // The stream every op is queued on (CUDA: a cudaStream_t), so a communicator's collectives are ordered with
  // the kernels around them; nullptr where ops run synchronously (CPU).
  virtual void* native_stream() const { return nullptr; }
  virtual KernelShapeLimits shape_limits() const { return {}; }
  virtual DType act_dtype() const = 0;  // F32 on the CPU reference, BF16 on CUDA
  // Dtype the backend wants dense matrices in (the loader converts once at load). nullopt: keep as stored.
  virtual std::optional<DType> matrix_dtype() const = 0;

  // --- memory (start-up and step plumbing; never inside a kernel sequence) ---
  virtual Result<DeviceAllocation> allocate(size_t bytes) = 0;
  // (free, total) bytes of device memory; nullopt where memory is the host's (sized by explicit limits).
  virtual std::optional<std::pair<size_t, size_t>> device_memory() const { return std::nullopt; }
  // Bytes an allocation can still get: the free device memory (device_memory()) on a GPU, MemAvailable of
  // /proc/meminfo on the CPU; nullopt where unknown.
  virtual std::optional<size_t> available_memory() const;
  // ResourceExhausted "<what>: 3.2 TiB needed, 22.1 GiB available on cpu" when `bytes` exceed
  // available_memory(). Start-up allocations sized by a config or flags check this first, so an absurd size
  // is reported before anything is allocated rather than as std::bad_alloc (or the OOM killer).
  Status check_available(uint64_t bytes, std::string_view what) const;
  virtual Status copy_to_device(void* dst, const void* host_src, size_t bytes) = 0;  // blocking
  virtual Status copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;    // blocking
  virtual Status copy_device_to_device(void* dst, const void* src, size_t bytes) = 0;
  // Copies that do not overlap one another, in stream order after the work before them. The CUDA backend
  // issues them as one cudaMemcpyBatchAsync (a verify step at batch 64 copies 64 sequences x 20 layers x 2
  // tensors: thousands of cudaMemcpyAsync calls otherwise); the default copies one by one.
  virtual Status copy_device_to_device_batch(const std::vector<DeviceCopy>& copies);
  // Bulk upload (weights): the CUDA backend streams several groups at once through pinned staging buffers;
  // `progress(bytes)` is called as copies complete (from any thread). Blocking.
  virtual Status copy_to_device_batch(const std::vector<CopyJob>& jobs,
                                      const std::function<void(size_t)>& progress);
  // Host memory for the prefix cache's host tier (--kv-offloading-size), checked against MemAvailable first:
  // page-locked where copies to and from it run asynchronously (CUDA: cudaHostAlloc), plain memory on the
  // CPU. An error names the size and the reason; the caller then runs without the tier.
  virtual Result<DeviceAllocation> allocate_host(size_t bytes);
  virtual bool host_memory_pinned() const { return false; }
  // Copies between device memory and allocate_host memory, in order, after the work queued before them and
  // before the work queued after, without the host waiting for them (CUDA: on a copy stream of its own,
  // joined to the compute stream by events both ways). Default: blocking copies one by one.
  virtual Status copy_host_tier_batch(const std::vector<HostCopy>& copies);
  // Totals of copy_host_tier_batch since the backend was made, for benchmarks (any thread). CUDA: device time
  // between timing events around each batch on the tier's stream, so the copies' own rate, not the host's
  // issue time; it waits for the batches still running. Default: host time of the blocking copies.
  virtual HostTierCopyTotals host_tier_copy_totals();
  virtual Status fill_zero(TensorView t) = 0;
  // Seeded uniform values (the --load-format dummy path): floats in [lo, hi); U8 integers in [lo, hi].
  // Element i depends only on (seed, i), so every backend fills the same values.
  virtual Status fill_random(TensorView t, uint64_t seed, float lo, float hi) = 0;
  // Mirrors `host` onto the device (staged, asynchronous on the compute stream) and fills `out`.
  virtual Status upload_layout(const BatchLayoutHost& host, int block_size, BatchLayout* out) = 0;
  // Like upload_layout, but into `dst` (`bytes` of device memory the caller owns) at offsets that depend only
  // on the layout's sequence and token counts, with block tables last at a row stride of `block_table_stride`
  // (>= host.max_blocks_per_seq): work captured over one such layout stays valid for the next layout of the
  // same counts uploaded there (the runner's decode graphs). fixed_layout_bytes() is the size it needs.
  virtual Status upload_layout_fixed(const BatchLayoutHost& host, int block_size, int block_table_stride,
                                     void* dst, size_t bytes, BatchLayout* out);
  static size_t fixed_layout_bytes(int n_seqs, int n_tokens, int block_table_stride);
  // Records the device work that `body` issues into a replayable CapturedWork without running it. Nothing in
  // `body` may wait for the device or copy from the host. Unimplemented where the backend has no graphs
  // (CPU).
  virtual Result<std::unique_ptr<CapturedWork>> capture(const std::function<Status()>& body);
  virtual bool can_capture() const { return false; }
  // The most MoE (token, expert) pairs a step replayed from a graph should carry: above it this backend's eager
  // step takes a faster path that a capture cannot (CUDA: cuBLAS's grouped GEMM for bf16 experts, which reads
  // the per-expert counts back to the host), so the runner runs such steps eagerly. `quantized_experts`: MXFP4
  // or FP8 experts.
  virtual int64_t graph_max_expert_pairs(bool /*quantized_experts*/) const { return INT64_MAX; }
  // Copies `bytes` of host data into device memory ordered with the compute stream (no host sync).
  virtual Status upload_async(void* dst, const void* host_src, size_t bytes) = 0;
  virtual Status synchronize() = 0;
  // Milliseconds `body` takes on the device (CUDA events around it; a host clock on the CPU). For benchmarks.
  virtual Result<double> time_ms(const std::function<Status()>& body);
  // Named ranges for profilers around a region of launches (NVTX on CUDA, so that e.g.
  // `ncu --nvtx --nvtx-include "decode batch 1/"` profiles just that region); nothing elsewhere.
  virtual void trace_push(const char* /*name*/) {}
  virtual void trace_pop() {}
  // Whether kda_prepare and kda_attention write the KDA snapshots a layout asks for inside a step
  // (BatchLayoutHost::kda_snapshots). Where not, prefix caching ends prefill chunks at the snapshot positions
  // instead (one step per snapshot).
  virtual bool kda_snapshots_in_step() const { return false; }

  // Changes a kernel-path option of this backend between steps (e.g. CUDA's moe_cublas_grouped = 0 | 1), so one
  // process can run and compare both paths; an unknown key, a bad value or an option that cannot change after
  // the backend is made is an InvalidArgument naming it.
  virtual Status set_option(const std::string& key, const std::string& value);

  // --- ops ---
  Status embed(const EmbedArgs& a);
  Status rms_norm(const RmsNormArgs& a);
  Status add_rms_norm(const AddRmsNormArgs& a);
  Status gemm(const GemmArgs& a);
  Status gemm_group(const GemmGroupArgs& a);
  Status glu(const GluArgs& a);
  Status add(const AddArgs& a);
  Status sigmoid_gate(const SigmoidGateArgs& a);
  Status kda_prepare(const KdaPrepareArgs& a);
  Status kda_attention(const KdaAttentionArgs& a);
  Status kda_output(const KdaOutputArgs& a);
  Status kda_fold(const KdaFoldArgs& a);
  // The fused KDA decode step: backends without it answer Unimplemented. kda_fuses_decode says whether the
  // model should use it for `a` (formats and sizes, and the backend's policy); elsewhere the model runs the
  // separate ops (gemm, kda_prepare, kda_attention, kda_output).
  Status kda_decode(const KdaDecodeArgs& a);
  virtual bool kda_fuses_decode(const KdaDecodeArgs&) const { return false; }
  Status mla_cache_write(const MlaCacheWriteArgs& a);
  Status mla_attention(const MlaAttentionArgs& a);
  Status moe_route(const MoeRouteArgs& a);
  Status moe_experts(const MoeExpertsArgs& a);
  Status gather_rows(const GatherRowsArgs& a);
  Status attn_res_mix(const AttnResMixArgs& a);
  Status sample(const SampleArgs& a);
  Status apply_penalties(const PenaltyArgs& a);
  Status mask_logits(const TokenMaskArgs& a);
  Status nonfinite_rows(const NonfiniteRowsArgs& a);
  Status logprobs(const LogprobsArgs& a);
  Status quantize_fp8(const QuantizeFp8Args& a);  // load time only (not a step op: no plan, no graph)

  // Planning (workspace_planner.h): a WorkspacePlanner answers true, and each op above then only takes the
  // scratch the planned backend's would from its arena and returns (no checks, nothing runs), so a forward
  // pass over a measuring Arena yields the workspace size. Every other backend answers false, always: no
  // backend changes mode.
  virtual bool plans_only() const { return false; }
  // Const scratch-size queries: the bytes an op takes from its `scratch` arena for these arguments (the CPU
  // reference takes none), asked by planning (WorkspacePlanner, the sampler's sample_scratch_bytes).
  virtual size_t kda_attention_scratch_bytes(const KdaAttentionArgs&) const { return 0; }
  virtual size_t mla_attention_scratch_bytes(const MlaAttentionArgs&) const { return 0; }
  virtual size_t moe_experts_scratch_bytes(const MoeExpertsArgs&) const { return 0; }
  // Taken only when GemmArgs::scratch is set (per part of a group, one part at a time).
  virtual size_t gemm_scratch_bytes(const GemmArgs&) const { return 0; }
  virtual size_t sample_scratch_bytes(const SampleArgs&) const { return 0; }
  // Whether moe_experts_impl computes a's shared expert itself (from shapes and formats only: planning asks
  // too); otherwise Backend::moe_experts runs it as separate ops after the routed experts.
  virtual bool moe_fuses_shared_expert(const MoeExpertsArgs&) const { return false; }
  // Whether gemm_group_impl / moe_route_impl run a's input norm (a.norm) themselves; otherwise Backend runs it
  // as add_rms_norm first and the impl gets a.norm == nullptr.
  virtual bool gemm_group_fuses_norm(const GemmGroupArgs&) const { return false; }
  virtual bool moe_route_fuses_norm(const MoeRouteArgs&) const { return false; }

 private:
  // copy_host_tier_batch's default path: its totals (the engine thread adds, a benchmark reads).
  std::atomic<uint64_t> tier_bytes_to_host_{0}, tier_bytes_to_device_{0}, tier_batches_{0},
      tier_nanoseconds_{0};

  virtual Status embed_impl(const EmbedArgs& a) = 0;
  virtual Status rms_norm_impl(const RmsNormArgs& a) = 0;
  virtual Status add_rms_norm_impl(const AddRmsNormArgs& a) = 0;
  virtual Status gemm_impl(const GemmArgs& a) = 0;
  // Default: one gemm_impl per part.
  virtual Status gemm_group_impl(const GemmGroupArgs& a);
  virtual Status glu_impl(const GluArgs& a) = 0;
  virtual Status add_impl(const AddArgs& a) = 0;
  virtual Status sigmoid_gate_impl(const SigmoidGateArgs& a) = 0;
  virtual Status kda_prepare_impl(const KdaPrepareArgs& a) = 0;
  virtual Status kda_attention_impl(const KdaAttentionArgs& a) = 0;
  virtual Status kda_output_impl(const KdaOutputArgs& a) = 0;
  // Default: Unimplemented (a backend without replay records; the runner then keeps checkpoint + re-feed).
  virtual Status kda_fold_impl(const KdaFoldArgs& a);
  virtual Status kda_decode_impl(const KdaDecodeArgs& a);
  virtual Status mla_cache_write_impl(const MlaCacheWriteArgs& a) = 0;
  virtual Status mla_attention_impl(const MlaAttentionArgs& a) = 0;
  virtual Status moe_route_impl(const MoeRouteArgs& a) = 0;
  virtual Status moe_experts_impl(const MoeExpertsArgs& a) = 0;
  virtual Status gather_rows_impl(const GatherRowsArgs& a) = 0;
  virtual Status attn_res_mix_impl(const AttnResMixArgs& a) = 0;
  virtual Status sample_impl(const SampleArgs& a) = 0;
  virtual Status apply_penalties_impl(const PenaltyArgs& a) = 0;
  virtual Status mask_logits_impl(const TokenMaskArgs& a) = 0;
  virtual Status nonfinite_rows_impl(const NonfiniteRowsArgs& a) = 0;
  virtual Status logprobs_impl(const LogprobsArgs& a) = 0;
  virtual Status quantize_fp8_impl(const QuantizeFp8Args& a) = 0;
};

// "cpu", "cuda" (device 0) or "cuda:N" (the N-th device CUDA shows, after CUDA_VISIBLE_DEVICES); errors name
// what is missing (no CUDA build, no GPU, a device index past the devices present).
Result<std::unique_ptr<Backend>> make_backend(std::string_view name);
// The CUDA device index of a "cuda" / "cuda:N" name; an error for any other spelling.
Result<int> parse_cuda_device(std::string_view name);
std::unique_ptr<Backend> make_cpu_backend();
bool cuda_backend_compiled();

}  // namespace rill::backend
