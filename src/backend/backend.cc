#include "backend/backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "core/sizes.h"

namespace rill::backend {
namespace {

// Shape/dtype checks shared by every backend (style.md §7.1): a failure names the op, the argument and the
// offending dimension, so a wrong call is caught before any kernel runs.
class Check {
 public:
  explicit Check(const char* op) : op_(op) {}

  Check& tensor(const TensorView& t, const char* name, int rank) {
    if (!status_.ok()) return *this;
    if (t.empty())
      fail("{}: {} is empty", op_, name);
    else if (t.rank() != rank)
      fail("{}: {} must have rank {}, got {}", op_, name, rank, t.describe());
    else if (t.stride(-1) != 1 && t.size(-1) > 1)
      fail("{}: {} must be contiguous in its last dim", op_, name);
    return *this;
  }
  Check& dtype(const TensorView& t, const char* name, DType want) {
    if (status_.ok() && t.dtype != want)
      fail("{}: {} must be {}, got {}", op_, name, dtype_name(want), dtype_name(t.dtype));
    return *this;
  }
  Check& dim(const TensorView& t, const char* name, int d, int64_t want) {
    if (status_.ok() && t.size(d) != want)
      fail("{}: {} dim {} must be {}, got {}", op_, name, d, want, t.describe());
    return *this;
  }
  Check& same_shape(const TensorView& a, const char* an, const TensorView& b, const char* bn) {
    if (status_.ok() && !(a.shape == b.shape))
      fail("{}: {} {} and {} {} must have the same shape", op_, an, a.describe(), bn, b.describe());
    return *this;
  }
  Check& that(bool cond, const char* what) {
    if (status_.ok() && !cond) fail("{}: {}", op_, what);
    return *this;
  }
  Status done() const { return status_; }

 private:
  template <typename... A>
  void fail(fmt::format_string<A...> f, A&&... a) {
    status_ = Status(StatusCode::Internal, fmt::format(f, std::forward<A>(a)...));
  }
  const char* op_;
  Status status_;
};

// The sequences a layout marks for replay records (BatchLayout::seq_kda_records) against the record buffer
// `rec` of `op` ([n_record_slots, R, ...]): it must be given, and each marked sequence's slot and new tokens
// must fit it; a marked sequence starts past position 0 (records fold onto a computed state) and takes no
// in-step snapshot.
Status check_record_seqs(const char* op, const BatchLayout& l, const TensorView& rec, const char* rec_name) {
  const BatchLayoutHost* host = l.host;
  if (!host || host->seq_kda_records.empty()) return {};
  for (int s = 0; s < host->n_seqs(); ++s) {
    if (!host->seq_kda_records[size_t(s)]) continue;
    if (rec.empty()) return internal_error("{}: sequence {} writes replay records but {} is not given", op, s, rec_name);
    const int slot = host->seq_state_slot[size_t(s)];
    if (slot < 0 || slot >= rec.size(0) || host->n_new(s) > rec.size(1))
      return internal_error("{}: sequence {} (slot {}, {} new tokens) does not fit {} {}", op, s, slot,
                            host->n_new(s), rec_name, rec.describe());
    if (host->seq_start_pos[size_t(s)] == 0)
      return internal_error("{}: sequence {} writes replay records from position 0", op, s);
    const auto& sb = host->kda_snapshots.seq_begin;
    if (!sb.empty() && sb[size_t(s) + 1] > sb[size_t(s)])
      return internal_error("{}: sequence {} writes replay records and takes in-step snapshots", op, s);
  }
  return {};
}

// Planning (plans_only): takes the op's scratch from the (measuring) arena and gives it back, so it counts
// towards the high-water mark exactly as the real op's use will.
Status reserve_scratch(Arena* scratch, size_t bytes) {
  if (bytes == 0) return {};
  if (!scratch) return internal_error("op needs {} scratch bytes but has no scratch arena", bytes);
  const size_t mark = scratch->used();
  scratch->alloc(DType::U8, {int64_t(bytes)});
  scratch->release_to(mark);
  return {};
}

}  // namespace

Status Backend::copy_device_to_device_batch(const std::vector<DeviceCopy>& copies) {
  for (const DeviceCopy& c : copies) RILL_TRY(copy_device_to_device(c.dst, c.src, c.bytes));
  return {};
}

Status Backend::copy_to_device_batch(const std::vector<CopyJob>& jobs,
                                     const std::function<void(size_t)>& progress) {
  for (const CopyJob& j : jobs) {
    RILL_TRY(copy_to_device(j.dst, j.src, j.bytes));
    if (progress) progress(j.bytes);
  }
  return {};
}

std::optional<size_t> host_available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  unsigned long long kib = 0;
  while (std::getline(meminfo, line))  // "MemAvailable:   23174512 kB"
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kib) == 1) return size_t(kib) * 1024;
  return std::nullopt;
}

Result<DeviceAllocation> Backend::allocate_host(size_t bytes) {
  if (const auto available = host_available_memory(); available && bytes > *available)
    return resource_exhausted("{} of host memory asked for, {} available", format_bytes(double(bytes)),
                              format_bytes(double(*available)));
  try {
    auto buf = std::make_shared<HostBuffer>(bytes ? bytes : 1);
    void* p = buf->data();
    return DeviceAllocation(p, bytes, std::move(buf));
  } catch (const std::bad_alloc&) {
    return resource_exhausted("cannot allocate {} of host memory", format_bytes(double(bytes)));
  }
}

Status Backend::copy_host_tier_batch(const std::vector<HostCopy>& copies) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const HostCopy& c : copies) {
    RILL_TRY(c.to_host ? copy_to_host(c.dst, c.src, c.bytes) : copy_to_device(c.dst, c.src, c.bytes));
    (c.to_host ? tier_bytes_to_host_ : tier_bytes_to_device_) += c.bytes;
  }
  tier_batches_++;
  tier_nanoseconds_ += uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  return {};
}

HostTierCopyTotals Backend::host_tier_copy_totals() {
  return {tier_bytes_to_host_.load(), tier_bytes_to_device_.load(), tier_batches_.load(),
          double(tier_nanoseconds_.load()) * 1e-9};
}

std::optional<size_t> Backend::available_memory() const {
  if (auto mem = device_memory()) return mem->first;
  return std::nullopt;
}

Status Backend::check_available(uint64_t bytes, std::string_view what) const {
  const std::optional<size_t> available = available_memory();
  if (!available || bytes <= *available) return {};
  return resource_exhausted("{}: {} needed, {} available on {}", what, format_bytes(double(bytes)),
                            format_bytes(double(*available)), name());
}

// Without device memory of its own a backend's layouts need no fixed home: the plain upload serves.
Status Backend::upload_layout_fixed(const BatchLayoutHost& host, int block_size, int block_table_stride,
                                    void*, size_t, BatchLayout* out) {
  if (block_table_stride < host.max_blocks_per_seq)
    return internal_error("upload_layout_fixed: block table stride {} below the layout's {} blocks",
                          block_table_stride, host.max_blocks_per_seq);
  return upload_layout(host, block_size, out);
}

size_t Backend::fixed_layout_bytes(int n_seqs, int n_tokens, int block_table_stride) {
  auto a256 = [](size_t n) { return (n * 4 + 255) / 256 * 256; };
  const size_t S = size_t(n_seqs), T = size_t(n_tokens);
  // seq_token_start, seq_start_pos, seq_state_slot, seq_kda_records, token_seq, token_pos, then the block
  // tables.
  return a256(S + 1) + 3 * a256(S) + 2 * a256(T) + a256(S * size_t(block_table_stride));
}

Result<std::unique_ptr<CapturedWork>> Backend::capture(const std::function<Status()>&) {
  return unimplemented("the {} backend cannot capture device work into a graph", name());
}

Result<double> Backend::time_ms(const std::function<Status()>& body) {
  RILL_TRY(synchronize());
  const auto t0 = std::chrono::steady_clock::now();
  RILL_TRY(body());
  RILL_TRY(synchronize());
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

Status Backend::embed(const EmbedArgs& a) {
  if (plans_only()) return {};
  Check c("embed");
  c.tensor(a.table, "table", 2)
      .tensor(a.ids, "ids", 1)
      .dtype(a.ids, "ids", DType::I32)
      .tensor(a.out, "out", 2)
      .that(a.out.dtype == act_dtype() || a.out.dtype == DType::F32, "out is the activation dtype or F32")
      .dim(a.out, "out", 0, a.ids.size(0))
      .dim(a.out, "out", 1, a.table.size(1));
  RILL_TRY(c.done());
  return embed_impl(a);
}

Status Backend::rms_norm(const RmsNormArgs& a) {
  if (plans_only()) return {};
  Check c("rms_norm");
  c.tensor(a.x, "x", 2)
      .tensor(a.out, "out", 2)
      .tensor(a.weight, "weight", 1)
      .dtype(a.weight, "weight", DType::F32)
      .same_shape(a.x, "x", a.out, "out")
      .dim(a.weight, "weight", 0, a.x.size(1))
      .that(a.x.dtype == act_dtype() || a.x.dtype == DType::F32, "x is the activation dtype or F32")
      .dtype(a.out, "out", act_dtype());
  RILL_TRY(c.done());
  return rms_norm_impl(a);
}

static Status check_add_rms_norm(const AddRmsNormArgs& a, DType act, const char* op) {
  Check c(op);
  c.tensor(a.residual, "residual", 2)
      .tensor(a.delta, "delta", 2)
      .tensor(a.out, "out", 2)
      .tensor(a.weight, "weight", 1)
      .dtype(a.weight, "weight", DType::F32)
      .same_shape(a.residual, "residual", a.delta, "delta")
      .same_shape(a.residual, "residual", a.out, "out")
      .dim(a.weight, "weight", 0, a.residual.size(1))
      .dtype(a.delta, "delta", act)
      .dtype(a.out, "out", act)
      .that(a.residual.dtype == act || a.residual.dtype == DType::F32, "residual is the activation dtype or F32");
  return c.done();
}

Status Backend::add_rms_norm(const AddRmsNormArgs& a) {
  if (plans_only()) return {};
  RILL_TRY(check_add_rms_norm(a, act_dtype(), "add_rms_norm"));
  return add_rms_norm_impl(a);
}

// An op's input norm (GemmGroupArgs::norm, MoeRouteArgs::norm): valid, and the op's input x is its output.
static Status check_input_norm(const AddRmsNormArgs& n, const TensorView& x, DType act, const char* op) {
  RILL_TRY(check_add_rms_norm(n, act, op));
  Check c(op);
  c.that(x.data == n.out.data && x.dtype == n.out.dtype && x.shape == n.out.shape && x.stride(0) == n.out.stride(0),
         "x must be the input norm's out");
  return c.done();
}

// An FP8 weight's codes and scales agree with its blocks (a mis-declared weight would read scales out of bounds).
static Status check_fp8_weight(const LinearWeight& w, const char* op) {
  if (w.format != WeightFormat::Fp8) return {};
  const int64_t out = w.weight.size(0), in = w.weight.size(1);
  if (w.weight.dtype != DType::F8E4M3 || w.scales.dtype != DType::F32 || w.block.rows <= 0 || w.block.cols <= 0 ||
      w.scales.rank() != 2 || w.scales.size(0) != w.block.scale_rows(out) ||
      w.scales.size(1) != w.block.scale_cols(in))
    return invalid_argument("{}: an FP8 weight must be F8_E4M3 [out, in] with F32 scales [{}, {}] for blocks of {} x {}; "
                            "got {} {} and {} {}",
                            op, w.block.rows > 0 ? w.block.scale_rows(out) : 0,
                            w.block.cols > 0 ? w.block.scale_cols(in) : 0, w.block.rows, w.block.cols,
                            dtype_name(w.weight.dtype), w.weight.shape.to_string(), dtype_name(w.scales.dtype),
                            w.scales.shape.to_string());
  return {};
}

// One GEMM's operands (gemm, and each part of gemm_group), the failure naming `op`.
static Status check_gemm(const GemmArgs& a, DType act, const char* op) {
  Check c(op);
  c.that(a.w != nullptr, "weight is null").tensor(a.x, "x", 2).tensor(a.out, "out", 2).dtype(a.x, "x", act);
  RILL_TRY(c.done());
  RILL_TRY(check_fp8_weight(*a.w, op));
  c.dim(a.x, "x", 1, a.w->in_features())
      .dim(a.out, "out", 0, a.x.size(0))
      .dim(a.out, "out", 1, a.w->out_features())
      .that(a.out.dtype == act || a.out.dtype == DType::F32, "out must be the activation dtype or F32");
  return c.done();
}

Status Backend::gemm(const GemmArgs& a) {
  if (plans_only()) return a.scratch ? reserve_scratch(a.scratch, gemm_scratch_bytes(a)) : Status{};
  RILL_TRY(check_gemm(a, act_dtype(), "gemm"));
  return gemm_impl(a);
}

Status Backend::gemm_group(const GemmGroupArgs& a) {
  if (plans_only()) {  // the parts run one after another: the largest part's scratch
    for (const GemmArgs& p : a.parts)
      if (p.scratch) RILL_TRY(reserve_scratch(p.scratch, gemm_scratch_bytes(p)));
    return {};
  }
  if (a.parts.empty() || int(a.parts.size()) > kMaxGemmGroup)
    return invalid_argument("gemm_group: {} parts (1 to {})", a.parts.size(), kMaxGemmGroup);
  for (const GemmArgs& p : a.parts) RILL_TRY(check_gemm(p, act_dtype(), "gemm_group"));
  if (!a.norm) return gemm_group_impl(a);
  for (const GemmArgs& p : a.parts) RILL_TRY(check_input_norm(*a.norm, p.x, act_dtype(), "gemm_group"));
  if (gemm_group_fuses_norm(a)) return gemm_group_impl(a);
  RILL_TRY(add_rms_norm_impl(*a.norm));
  return gemm_group_impl({a.parts});
}

Status Backend::gemm_group_impl(const GemmGroupArgs& a) {
  for (const GemmArgs& p : a.parts) RILL_TRY(gemm_impl(p));
  return {};
}

Status Backend::glu(const GluArgs& a) {
  if (plans_only()) return {};
  Check c("glu");
  c.tensor(a.gate, "gate", 2)
      .tensor(a.up, "up", 2)
      .tensor(a.out, "out", 2)
      .same_shape(a.gate, "gate", a.up, "up")
      .same_shape(a.gate, "gate", a.out, "out")
      .that(a.activation != Activation::Situ || (a.beta > 0 && a.linear_beta > 0),
            "SiTU needs positive betas");
  RILL_TRY(c.done());
  return glu_impl(a);
}

Status Backend::add(const AddArgs& a) {
  if (plans_only()) return {};
  Check c("add");
  c.tensor(a.inout, "inout", 2)
      .tensor(a.x, "x", 2)
      .same_shape(a.inout, "inout", a.x, "x")
      .dtype(a.x, "x", act_dtype())
      .that(a.inout.dtype == act_dtype() || a.inout.dtype == DType::F32,
            "inout is the activation dtype or F32");
  RILL_TRY(c.done());
  return add_impl(a);
}

Status Backend::sigmoid_gate(const SigmoidGateArgs& a) {
  if (plans_only()) return {};
  Check c("sigmoid_gate");
  c.tensor(a.inout, "inout", 2).tensor(a.gate, "gate", 2).same_shape(a.inout, "inout", a.gate, "gate");
  RILL_TRY(c.done());
  return sigmoid_gate_impl(a);
}

Status Backend::kda_prepare(const KdaPrepareArgs& a) {
  if (plans_only()) return {};
  Check c("kda_prepare");
  c.that(a.layout != nullptr, "layout is null")
      .tensor(a.qkv, "qkv", 2)
      .tensor(a.conv_weight, "conv_weight", 2)
      .dtype(a.conv_weight, "conv_weight", DType::F32)
      .tensor(a.conv_state, "conv_state", 3)
      .tensor(a.graw, "graw", 2)
      .tensor(a.braw, "braw", 2)
      .tensor(a.a_log, "a_log", 1)
      .dtype(a.a_log, "a_log", DType::F32)
      .tensor(a.dt_bias, "dt_bias", 1)
      .dtype(a.dt_bias, "dt_bias", DType::F32)
      .tensor(a.q, "q", 3)
      .tensor(a.k, "k", 3)
      .tensor(a.v, "v", 3)
      .tensor(a.g, "g", 3)
      .dtype(a.g, "g", DType::F32)
      .tensor(a.beta, "beta", 2)
      .dtype(a.beta, "beta", DType::F32);
  RILL_TRY(c.done());
  const int64_t T = a.qkv.size(0), P = int64_t(a.n_heads) * a.head_dim, K = a.conv_weight.size(1);
  c.that(a.n_heads > 0 && a.head_dim > 0, "n_heads and head_dim must be set")
      .dim(a.qkv, "qkv", 1, 3 * P)
      .dim(a.conv_weight, "conv_weight", 0, 3 * P)
      .dim(a.conv_state, "conv_state", 1, K - 1)
      .dim(a.conv_state, "conv_state", 2, 3 * P)
      .dim(a.graw, "graw", 0, T)
      .dim(a.graw, "graw", 1, P)
      .dim(a.braw, "braw", 0, T)
      .dim(a.braw, "braw", 1, a.n_heads)
      .dim(a.a_log, "a_log", 0, a.n_heads)
      .dim(a.dt_bias, "dt_bias", 0, P)
      .same_shape(a.q, "q", a.k, "k")
      .same_shape(a.q, "q", a.v, "v")
      .same_shape(a.q, "q", a.g, "g")
      .dim(a.q, "q", 0, T)
      .dim(a.q, "q", 1, a.n_heads)
      .dim(a.q, "q", 2, a.head_dim)
      .dim(a.beta, "beta", 0, T)
      .dim(a.beta, "beta", 1, a.n_heads)
      .that(T == a.layout->n_tokens, "T != layout tokens");
  RILL_TRY(c.done());
  // Each snapshot's conv window is K-1 rows of this step's qkv, written into its slot: both must exist.
  if (a.layout->kda_snapshots.n > 0) {
    const BatchLayoutHost* host = a.layout->host;
    if (!host) return internal_error("kda_prepare: snapshot requests without the layout's host description");
    const KdaSnapshotsHost& snaps = host->kda_snapshots;
    for (int s = 0; s < host->n_seqs(); ++s)
      for (int j = snaps.seq_begin[size_t(s)]; j < snaps.seq_begin[size_t(s) + 1]; ++j) {
        const KdaSnapshotRequest& r = snaps.requests[size_t(j)];
        const int64_t rel = r.pos - host->seq_start_pos[size_t(s)];
        if (rel < K - 1 || rel > host->n_new(s) || r.slot < 0 || r.slot >= a.conv_state.size(0))
          return internal_error("kda_prepare: sequence {}'s snapshot after position {} in slot {} is not inside "
                                "its step [{}, {}) past the conv window, or its slot not in [0, {})",
                                s, r.pos, r.slot, host->seq_start_pos[size_t(s)],
                                host->seq_start_pos[size_t(s)] + host->n_new(s), a.conv_state.size(0));
      }
  }
  if (!a.conv_records.empty()) {
    c.tensor(a.conv_records, "conv_records", 3)
        .dtype(a.conv_records, "conv_records", a.conv_state.dtype)
        .dim(a.conv_records, "conv_records", 2, 3 * P);
    RILL_TRY(c.done());
  }
  RILL_TRY(check_record_seqs("kda_prepare", *a.layout, a.conv_records, "conv_records"));
  return kda_prepare_impl(a);
}

Status Backend::kda_attention(const KdaAttentionArgs& a) {
  if (plans_only()) return reserve_scratch(a.scratch, kda_attention_scratch_bytes(a));
  Check c("kda_attention");
  c.that(a.layout != nullptr, "layout is null")
      .tensor(a.q, "q", 3)
      .tensor(a.k, "k", 3)
      .tensor(a.v, "v", 3)
      .tensor(a.g, "g", 3)
      .dtype(a.g, "g", DType::F32)
      .tensor(a.beta, "beta", 2)
      .dtype(a.beta, "beta", DType::F32)
      .tensor(a.state, "state", 4)
      .dtype(a.state, "state", DType::F32)
      .tensor(a.out, "out", 3)
      .same_shape(a.q, "q", a.k, "k")
      .same_shape(a.q, "q", a.v, "v")
      .same_shape(a.q, "q", a.g, "g")
      .same_shape(a.q, "q", a.out, "out");
  RILL_TRY(c.done());
  c.dim(a.state, "state", 1, a.q.size(1))
      .dim(a.state, "state", 2, a.q.size(2))
      .dim(a.state, "state", 3, a.q.size(2))
      .dim(a.beta, "beta", 0, a.q.size(0))
      .dim(a.beta, "beta", 1, a.q.size(1))
      .that(a.q.size(0) == a.layout->n_tokens, "T != layout tokens");
  RILL_TRY(c.done());
  if (!a.records.empty()) {
    c.tensor(a.records, "records", 5)
        .dtype(a.records, "records", DType::F32)
        .that(a.records.is_contiguous(), "records must be contiguous")
        .dim(a.records, "records", 2, a.q.size(1))
        .dim(a.records, "records", 3, 3)
        .dim(a.records, "records", 4, a.q.size(2));
    RILL_TRY(c.done());
  }
  RILL_TRY(check_record_seqs("kda_attention", *a.layout, a.records, "records"));
  return kda_attention_impl(a);
}

Status Backend::kda_fold(const KdaFoldArgs& a) {
  if (plans_only()) return {};
  Check c("kda_fold");
  c.tensor(a.records, "records", 5)
      .dtype(a.records, "records", DType::F32)
      .that(a.records.is_contiguous(), "records must be contiguous")
      .tensor(a.conv_records, "conv_records", 3)
      .tensor(a.state, "state", 4)
      .dtype(a.state, "state", DType::F32)
      .tensor(a.conv_state, "conv_state", 3)
      .dtype(a.conv_records, "conv_records", a.conv_state.dtype)
      .tensor(a.slots, "slots", 1)
      .dtype(a.slots, "slots", DType::I32)
      .tensor(a.n_tokens, "n_tokens", 1)
      .dtype(a.n_tokens, "n_tokens", DType::I32)
      .same_shape(a.slots, "slots", a.n_tokens, "n_tokens");
  RILL_TRY(c.done());
  c.dim(a.records, "records", 2, a.state.size(1))
      .dim(a.records, "records", 3, 3)
      .dim(a.records, "records", 4, a.state.size(2))
      .dim(a.state, "state", 3, a.state.size(2))
      .dim(a.conv_records, "conv_records", 0, a.records.size(0))
      .dim(a.conv_records, "conv_records", 1, a.records.size(1))
      .dim(a.conv_records, "conv_records", 2, a.conv_state.size(2))
      .that(a.records.size(0) <= a.state.size(0) && a.records.size(0) <= a.conv_state.size(0),
            "more record slots than state slots");
  RILL_TRY(c.done());
  return kda_fold_impl(a);
}

Status Backend::kda_fold_impl(const KdaFoldArgs&) {
  return unimplemented("kda_fold: the {} backend has no replay records", name());
}

Status Backend::kda_output(const KdaOutputArgs& a) {
  if (plans_only()) return {};
  Check c("kda_output");
  c.tensor(a.o, "o", 3)
      .tensor(a.gate, "gate", 2)
      .tensor(a.weight, "weight", 1)
      .dtype(a.weight, "weight", DType::F32)
      .tensor(a.out, "out", 2);
  RILL_TRY(c.done());
  const int64_t P = a.o.size(1) * a.o.size(2);
  c.dim(a.gate, "gate", 0, a.o.size(0))
      .dim(a.gate, "gate", 1, P)
      .dim(a.out, "out", 0, a.o.size(0))
      .dim(a.out, "out", 1, P)
      .dim(a.weight, "weight", 0, a.o.size(2));
  RILL_TRY(c.done());
  return kda_output_impl(a);
}

Status Backend::kda_decode(const KdaDecodeArgs& a) {
  if (plans_only()) return {};
  Check c("kda_decode");
  c.that(a.layout != nullptr, "layout is null")
      .that(a.f_b != nullptr, "f_b is null")
      .tensor(a.qkv, "qkv", 2)
      .tensor(a.fa, "fa", 2)
      .tensor(a.braw, "braw", 2)
      .tensor(a.conv_weight, "conv_weight", 2)
      .dtype(a.conv_weight, "conv_weight", DType::F32)
      .tensor(a.conv_state, "conv_state", 3)
      .tensor(a.a_log, "a_log", 1)
      .dtype(a.a_log, "a_log", DType::F32)
      .tensor(a.dt_bias, "dt_bias", 1)
      .dtype(a.dt_bias, "dt_bias", DType::F32)
      .tensor(a.state, "state", 4)
      .dtype(a.state, "state", DType::F32)
      .tensor(a.o_norm, "o_norm", 1)
      .dtype(a.o_norm, "o_norm", DType::F32)
      .tensor(a.out, "out", 2);
  if (a.g_b)
    c.tensor(a.ga, "ga", 2);
  else
    c.tensor(a.gate, "gate", 2);
  RILL_TRY(c.done());
  const int64_t T = a.qkv.size(0), d = a.head_dim, P = int64_t(a.n_heads) * d, K = a.conv_weight.size(1);
  c.that(a.n_heads > 0 && a.head_dim > 0, "n_heads and head_dim must be set")
      .that(T == a.layout->n_tokens && T == a.layout->n_seqs, "every sequence must bring exactly one token")
      .dim(a.qkv, "qkv", 1, 3 * P)
      .dim(a.fa, "fa", 0, T)
      .dim(a.fa, "fa", 1, d)
      .that(a.f_b->out_features() == P && a.f_b->in_features() == d, "f_b must be [P, d]")
      .dim(a.braw, "braw", 0, T)
      .dim(a.braw, "braw", 1, a.n_heads)
      .dim(a.conv_weight, "conv_weight", 0, 3 * P)
      .dim(a.conv_state, "conv_state", 1, K - 1)
      .dim(a.conv_state, "conv_state", 2, 3 * P)
      .dim(a.a_log, "a_log", 0, a.n_heads)
      .dim(a.dt_bias, "dt_bias", 0, P)
      .dim(a.state, "state", 1, a.n_heads)
      .dim(a.state, "state", 2, d)
      .dim(a.state, "state", 3, d)
      .dim(a.o_norm, "o_norm", 0, d)
      .dim(a.out, "out", 0, T)
      .dim(a.out, "out", 1, P);
  if (a.g_b)
    c.dim(a.ga, "ga", 0, T)
        .dim(a.ga, "ga", 1, d)
        .that(a.g_b->out_features() == P && a.g_b->in_features() == d, "g_b must be [P, d]");
  else
    c.dim(a.gate, "gate", 0, T).dim(a.gate, "gate", 1, P);
  RILL_TRY(c.done());
  return kda_decode_impl(a);
}

Status Backend::kda_decode_impl(const KdaDecodeArgs&) {
  return unimplemented("kda_decode: {} runs the KDA decode step as separate ops", name());
}

Status Backend::mla_cache_write(const MlaCacheWriteArgs& a) {
  if (plans_only()) return {};
  Check c("mla_cache_write");
  c.that(a.layout != nullptr, "layout is null")
      .tensor(a.ckv, "ckv", 2)
      .tensor(a.norm_weight, "norm_weight", 1)
      .dtype(a.norm_weight, "norm_weight", DType::F32)
      .tensor(a.cache, "cache", 3)
      .dim(a.cache, "cache", 2, a.ckv.size(1))
      .that(a.norm_weight.size(0) < a.ckv.size(1), "norm wider than ckv")
      .that(a.ckv.size(0) == a.layout->n_tokens, "T != layout tokens")
      .that(a.cache.size(1) == a.layout->block_size, "cache block size != layout block size");
  RILL_TRY(c.done());
  return mla_cache_write_impl(a);
}

Status Backend::mla_attention(const MlaAttentionArgs& a) {
  if (plans_only()) return reserve_scratch(a.scratch, mla_attention_scratch_bytes(a));
  Check c("mla_attention");
  c.that(a.layout != nullptr && a.kv_b != nullptr, "layout or kv_b is null")
      .tensor(a.q, "q", 3)
      .tensor(a.cache, "cache", 3)
      .tensor(a.out, "out", 2);
  RILL_TRY(c.done());
  c.dim(a.q, "q", 1, a.n_heads)
      .dim(a.q, "q", 2, a.nope + a.rope)
      .dim(a.cache, "cache", 2, a.kv_lora + a.rope)
      .dim(a.out, "out", 0, a.q.size(0))
      .dim(a.out, "out", 1, int64_t(a.n_heads) * a.v_dim)
      .that(a.kv_b->out_features() == int64_t(a.n_heads) * (a.nope + a.v_dim) &&
                a.kv_b->in_features() == a.kv_lora,
            "kv_b must be [n_heads * (nope + v), kv_lora]")
      .that(a.q.size(0) == a.layout->n_tokens, "T != layout tokens")
      .that(a.scale > 0, "scale must be positive");
  RILL_TRY(c.done());
  return mla_attention_impl(a);
}

Status Backend::moe_route(const MoeRouteArgs& a) {
  if (plans_only()) return {};
  Check c("moe_route");
  c.tensor(a.x, "x", 2)
      .tensor(a.gate_weight, "gate_weight", 2)
      .tensor(a.ids, "ids", 2)
      .dtype(a.ids, "ids", DType::I32)
      .tensor(a.weights, "weights", 2)
      .dtype(a.weights, "weights", DType::F32);
  RILL_TRY(c.done());
  const int64_t E = a.gate_weight.size(0);
  c.dim(a.gate_weight, "gate_weight", 1, a.x.size(1))
      .dim(a.ids, "ids", 0, a.x.size(0))
      .dim(a.ids, "ids", 1, a.top_k)
      .same_shape(a.ids, "ids", a.weights, "weights")
      .that(a.top_k >= 1 && a.top_k <= E, "top_k out of range")
      .that(a.n_groups >= 1 && E % a.n_groups == 0, "groups must divide experts")
      .that(a.bias.empty() || (a.bias.dtype == DType::F32 && a.bias.numel() == E), "bias must be F32 [E]")
      .that(a.n_local >= 0 && a.expert_begin >= 0 && a.expert_begin + a.n_local <= E,
            "local experts must lie inside [0, E)");
  RILL_TRY(c.done());
  if (!a.norm) return moe_route_impl(a);
  RILL_TRY(check_input_norm(*a.norm, a.x, act_dtype(), "moe_route"));
  if (moe_route_fuses_norm(a)) return moe_route_impl(a);
  RILL_TRY(add_rms_norm_impl(*a.norm));
  MoeRouteArgs plain = a;
  plain.norm = nullptr;
  return moe_route_impl(plain);
}

Status Backend::moe_experts(const MoeExpertsArgs& a) {
  const bool has_shared = a.shared_gate_up != nullptr || a.shared_down != nullptr;
  const bool unfused_shared = has_shared && !moe_fuses_shared_expert(a);
  MoeExpertsArgs routed = a;
  if (unfused_shared) routed.shared_gate_up = routed.shared_down = nullptr;
  // The unfused shared expert's scratch: gate|up, its activation and its output.
  struct SharedScratch {
    TensorView gu, h, out;
  };
  auto take_shared_scratch = [&]() {
    const int64_t T = a.x.size(0), Is = a.shared_down->in_features();
    return SharedScratch{a.scratch->alloc(a.x.dtype, {T, 2 * Is}), a.scratch->alloc(a.x.dtype, {T, Is}),
                         a.scratch->alloc(a.x.dtype, {T, a.out.size(1)})};
  };
  if (plans_only()) {
    RILL_TRY(reserve_scratch(a.scratch, moe_experts_scratch_bytes(routed)));
    if (!unfused_shared || !a.shared_down) return {};
    if (!a.scratch) return internal_error("moe_experts: the shared expert needs a scratch arena");
    const size_t mark = a.scratch->used();
    const SharedScratch sh = take_shared_scratch();  // measured by the planning arena
    RILL_TRY(
        reserve_scratch(a.scratch, std::max(gemm_scratch_bytes({a.x, a.shared_gate_up, sh.gu, a.scratch}),
                                            gemm_scratch_bytes({sh.h, a.shared_down, sh.out, a.scratch}))));
    a.scratch->release_to(mark);
    return {};
  }
  Check c("moe_experts");
  c.that(a.experts != nullptr, "experts is null")
      .tensor(a.x, "x", 2)
      .tensor(a.ids, "ids", 2)
      .dtype(a.ids, "ids", DType::I32)
      .tensor(a.weights, "weights", 2)
      .same_shape(a.ids, "ids", a.weights, "weights")
      .tensor(a.out, "out", 2)
      .same_shape(a.x, "x", a.out, "out")
      .that(!has_shared || (a.shared_gate_up && a.shared_down), "shared expert needs both gate_up and down");
  RILL_TRY(c.done());
  c.dim(a.x, "x", 1, a.experts->width()).dim(a.ids, "ids", 0, a.x.size(0));
  if (has_shared)
    c.that(a.shared_gate_up->in_features() == a.x.size(1) && a.shared_down->out_features() == a.x.size(1) &&
               a.shared_gate_up->out_features() == 2 * a.shared_down->in_features(),
           "shared expert shapes must be gate_up [2 Is, Hx] and down [Hx, Is]");
  RILL_TRY(c.done());
  RILL_TRY(moe_experts_impl(routed));
  if (!unfused_shared) return {};
  if (!a.scratch) return internal_error("moe_experts: the shared expert needs a scratch arena");
  const int64_t Is = a.shared_down->in_features();
  const size_t mark = a.scratch->used();
  const SharedScratch sh = take_shared_scratch();
  RILL_TRY(gemm({a.x, a.shared_gate_up, sh.gu, a.scratch}));
  RILL_TRY(glu({sh.gu.narrow(1, 0, Is), sh.gu.narrow(1, Is, Is), sh.h, a.activation, a.beta, a.linear_beta}));
  RILL_TRY(gemm({sh.h, a.shared_down, sh.out, a.scratch}));
  RILL_TRY(add({a.out, sh.out}));
  a.scratch->release_to(mark);  // later work on the backend's stream is ordered after these ops
  return {};
}

Status Backend::gather_rows(const GatherRowsArgs& a) {
  if (plans_only()) return {};
  Check c("gather_rows");
  c.tensor(a.x, "x", 2)
      .tensor(a.rows, "rows", 1)
      .dtype(a.rows, "rows", DType::I32)
      .tensor(a.out, "out", 2)
      .dim(a.out, "out", 0, a.rows.size(0))
      .dim(a.out, "out", 1, a.x.size(1))
      .that(a.x.dtype == a.out.dtype, "dtypes");
  RILL_TRY(c.done());
  return gather_rows_impl(a);
}

Status Backend::attn_res_mix(const AttnResMixArgs& a) {
  if (plans_only()) return {};
  Check c("attn_res_mix");
  c.tensor(a.candidates, "candidates", 3)
      .tensor(a.out, "out", 2)
      .tensor(a.norm_weight, "norm_weight", 1)
      .tensor(a.proj_weight, "proj_weight", 1)
      .dtype(a.norm_weight, "norm_weight", DType::F32)
      .dtype(a.proj_weight, "proj_weight", DType::F32)
      .that(a.candidates.dtype == act_dtype() || a.candidates.dtype == DType::F32,
            "candidates are the activation dtype or F32")
      .that(a.out.dtype == act_dtype() || a.out.dtype == DType::F32, "out is the activation dtype or F32");
  RILL_TRY(c.done());
  const int64_t H = a.candidates.size(2);
  c.that(a.candidates.size(0) >= 1, "needs at least one candidate")
      .dim(a.out, "out", 0, a.candidates.size(1))
      .dim(a.out, "out", 1, H)
      .dim(a.norm_weight, "norm_weight", 0, H)
      .dim(a.proj_weight, "proj_weight", 0, H)
      .that(a.eps > 0, "eps must be positive");
  RILL_TRY(c.done());
  return attn_res_mix_impl(a);
}

Status Backend::sample(const SampleArgs& a) {
  if (plans_only()) return reserve_scratch(a.scratch, sample_scratch_bytes(a));
  Check c("sample");
  c.tensor(a.logits, "logits", 2)
      .dtype(a.logits, "logits", DType::F32)
      .tensor(a.out_ids, "out_ids", 1)
      .dtype(a.out_ids, "out_ids", DType::I32)
      .dim(a.out_ids, "out_ids", 0, a.logits.size(0))
      .that(a.rows != nullptr, "rows is null");
  RILL_TRY(c.done());
  return sample_impl(a);
}

}  // namespace rill::backend

namespace rill::backend {

Status Backend::apply_penalties(const PenaltyArgs& a) {
  if (plans_only()) return {};
  Check c("apply_penalties");
  c.tensor(a.logits, "logits", 2)
      .dtype(a.logits, "logits", DType::F32)
      .that(a.row_offsets && a.tokens && a.output_counts && a.penalties, "null token arrays");
  RILL_TRY(c.done());
  return apply_penalties_impl(a);
}

Status Backend::mask_logits(const TokenMaskArgs& a) {
  if (plans_only()) return {};
  Check c("mask_logits");
  c.tensor(a.logits, "logits", 2)
      .dtype(a.logits, "logits", DType::F32)
      .that(a.mask != nullptr, "mask is null")
      .that(a.words_per_row * 32 >= a.logits.size(1), "words_per_row too small for the vocabulary");
  RILL_TRY(c.done());
  return mask_logits_impl(a);
}

Status Backend::nonfinite_rows(const NonfiniteRowsArgs& a) {
  if (plans_only()) return {};
  Check c("nonfinite_rows");
  c.tensor(a.logits, "logits", 2)
      .dtype(a.logits, "logits", DType::F32)
      .tensor(a.out, "out", 1)
      .dtype(a.out, "out", DType::I32)
      .that(a.out.size(0) == a.logits.size(0), "out has one flag per logits row");
  RILL_TRY(c.done());
  return nonfinite_rows_impl(a);
}

Status Backend::logprobs(const LogprobsArgs& a) {
  if (plans_only()) return {};
  Check c("logprobs");
  c.tensor(a.logits, "logits", 2)
      .dtype(a.logits, "logits", DType::F32)
      .tensor(a.sampled, "sampled", 1)
      .dtype(a.sampled, "sampled", DType::I32)
      .dim(a.sampled, "sampled", 0, a.logits.size(0))
      .tensor(a.out_logprob, "out_logprob", 1)
      .dtype(a.out_logprob, "out_logprob", DType::F32)
      .that(a.top_n >= 0 && a.top_n <= 20, "top_n must be in 0..20");
  RILL_TRY(c.done());
  if (a.top_n > 0) {
    c.tensor(a.out_top_ids, "out_top_ids", 2)
        .dim(a.out_top_ids, "out_top_ids", 1, a.top_n)
        .tensor(a.out_top_logprobs, "out_top_logprobs", 2)
        .dim(a.out_top_logprobs, "out_top_logprobs", 1, a.top_n);
    RILL_TRY(c.done());
  }
  return logprobs_impl(a);
}

Status Backend::quantize_fp8(const QuantizeFp8Args& a) {
  Check c("quantize_fp8");
  c.tensor(a.src, "src", 2)
      .that(a.src.dtype == DType::BF16 || a.src.dtype == DType::F16 || a.src.dtype == DType::F32,
            "src is BF16, F16 or F32")
      .tensor(a.codes, "codes", 2)
      .that(a.codes.dtype == DType::F8E4M3 || a.codes.dtype == DType::U8, "codes are F8E4M3 or U8")
      .same_shape(a.src, "src", a.codes, "codes")
      .tensor(a.scales, "scales", 2)
      .dtype(a.scales, "scales", DType::F32)
      .that(a.block.rows > 0 && a.block.cols > 0, "the blocks are at least 1 x 1");
  RILL_TRY(c.done());
  c.dim(a.scales, "scales", 0, a.block.scale_rows(a.src.size(0)))
      .dim(a.scales, "scales", 1, a.block.scale_cols(a.src.size(1)))
      .that(a.src.stride(1) == 1 && a.src.stride(0) == a.src.size(1), "src rows are contiguous")
      .that(a.codes.stride(1) == 1 && a.codes.stride(0) == a.codes.size(1), "codes rows are contiguous")
      .that(a.scales.stride(1) == 1 && a.scales.stride(0) == a.scales.size(1), "scales are row-major");
  RILL_TRY(c.done());
  if (a.src.numel() == 0) return {};
  return quantize_fp8_impl(a);
}

std::string Backend::device_description() const {
  return fmt::format("{} ({} hardware threads)", name(), std::thread::hardware_concurrency());
}

Status Backend::set_option(const std::string& key, const std::string& value) {
  return invalid_argument("backend {} has no option {} (value {})", name(), key, value);
}

}  // namespace rill::backend
