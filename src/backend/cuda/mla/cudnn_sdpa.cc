// CudnnSdpa (cudnn_sdpa.h): the MLA prefill attention as a cuDNN backend-API operation graph, the form
// cuDNN's fused flash-attention engines match (its docs' SDPA forward pattern, the graph its frontend library
// emits):
//   S = Q K^T (fp32)  ->  S * scale  ->  padding mask (row < seq_q[b] && col < seq_kv[b], else -inf)
//   ->  bottom-right causal mask (row + seq_kv[b] - seq_q[b] >= col, else -inf)
//   ->  softmax (max, sub, exp, sum, div; P in bf16)  ->  O = P V;  stats = max + log(sum) (an output: see
//   build_graph, cuDNN 9.14's engine writes it whether or not the graph asks)
// Q, K, V and O are ragged: batch entry b starts at its ragged offset (int64 elements from the tensor's data
// pointer), so the sequences of a step lie packed as rill keeps them and the dims only bound them. Query row
// i of sequence b sits at absolute position seq_kv[b] - seq_q[b] + i = start_pos + i, the alignment the
// causal mask above encodes. Built only with cuDNN (RILL_HAVE_CUDNN); otherwise create() answers Unavailable
// and nothing else is reached.
#include "backend/cuda/mla/cudnn_sdpa.h"

#if RILL_HAVE_CUDNN

#include <cudnn.h>

#include <array>
#include <chrono>
#include <limits>
#include <utility>
#include <vector>

#include "backend/cuda/common/check.h"
#include "backend/cuda/mla/params.h"
#include "core/log.h"

namespace rill::cuda::mla {
namespace {

Status cudnn_error(cudnnStatus_t st, const char* call) {
  char detail[1024] = {};
  cudnnGetLastErrorString(detail, sizeof detail);
  const std::string msg = fmt::format("cuDNN {} failed: {} ({}){}{}", call, cudnnGetErrorString(st), int(st),
                                      detail[0] ? ": " : "", detail);
  // The NOT_SUPPORTED family: no engine for this graph or shape; the caller may take rill's kernel instead.
  if (CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED) return unimplemented("{}", msg);
  return internal_error("{}", msg);
}

#define RILL_CUDNN_CHECK(call)                                                             \
  do {                                                                                     \
    const cudnnStatus_t rill_cudnn_st_ = (call);                                           \
    if (rill_cudnn_st_ != CUDNN_STATUS_SUCCESS) return cudnn_error(rill_cudnn_st_, #call); \
  } while (0)

// Owns one backend descriptor.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptor_t d = nullptr) : d_(d) {}
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc& operator=(Desc&& o) noexcept {
    if (this != &o) {
      reset();
      d_ = std::exchange(o.d_, nullptr);
    }
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc() { reset(); }
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  void reset() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
    d_ = nullptr;
  }
  cudnnBackendDescriptor_t d_;
};

// Non-virtual tensors of the graph (the variant pack's ids); virtual ones are numbered from kFirstVirtual.
enum Uid : int64_t {
  kUidQ = 1,
  kUidK,
  kUidV,
  kUidO,
  kUidSeqQ,
  kUidSeqKv,
  kUidOffQ,
  kUidOffK,
  kUidOffV,
  kUidOffO,
  kUidScale,
  kUidMaskPad,
  kUidMaskCausal,
  kUidStats,
  kUidOffStats,
  kUidCount,
  kFirstVirtual = 100,
};

using Dims = std::array<int64_t, 4>;

struct TensorSpec {
  int64_t uid;
  cudnnDataType_t type;
  Dims dim, stride;
  bool is_virtual = false, by_value = false;
  cudnnBackendDescriptor_t ragged = nullptr;  // ragged offset tensor (int64 elements, [batch + 1])
};

// One plan: every descriptor it was built from (kept alive with it) and the finalised execution plan.
struct CudnnPlan {
  std::vector<Desc> descs;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0;
};

// Builds the graph of one SdpaShape into `p` (descriptors appended to p->descs).
class GraphBuilder {
 public:
  GraphBuilder(cudnnHandle_t handle, CudnnPlan* p) : handle_(handle), p_(p) {}

  Result<cudnnBackendDescriptor_t> make(cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = nullptr;
    RILL_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d));
    p_->descs.emplace_back(d);
    return d;
  }

  Result<cudnnBackendDescriptor_t> tensor(const TensorSpec& t) {
    RILL_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t d, make(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
    const int64_t align = 16;
    RILL_CUDNN_CHECK(
        cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t.type));
    RILL_CUDNN_CHECK(
        cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t.dim.data()));
    RILL_CUDNN_CHECK(
        cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t.stride.data()));
    RILL_CUDNN_CHECK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid));
    RILL_CUDNN_CHECK(
        cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    if (t.is_virtual) {
      const bool v = true;
      RILL_CUDNN_CHECK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v));
    }
    if (t.by_value) {
      const bool v = true;
      RILL_CUDNN_CHECK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &v));
    }
    if (t.ragged)
      RILL_CUDNN_CHECK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t.ragged));
    RILL_CUDNN_CHECK(cudnnBackendFinalize(d));
    return d;
  }

  // A virtual tensor of the given shape (packed strides) and type.
  Result<cudnnBackendDescriptor_t> virt(cudnnDataType_t type, const Dims& dim) {
    const Dims stride{dim[1] * dim[2] * dim[3], dim[2] * dim[3], dim[3], 1};
    return tensor({next_virtual_++, type, dim, stride, /*is_virtual=*/true});
  }

  // y = mode(x[, b[, t]]) computed in `math`; `axis` for GEN_INDEX only.
  Status pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math, cudnnBackendDescriptor_t x,
                   cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                   int64_t axis = -1) {
    RILL_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t pw, make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
    RILL_CUDNN_CHECK(
        cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
    RILL_CUDNN_CHECK(
        cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math));
    if (mode == CUDNN_POINTWISE_GEN_INDEX)
      RILL_CUDNN_CHECK(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis));
    RILL_CUDNN_CHECK(cudnnBackendFinalize(pw));
    RILL_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op, make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR));
    const float one = 1.0f;
    RILL_CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
    RILL_CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    if (b)
      RILL_CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
    if (t)
      RILL_CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t));
    RILL_CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    RILL_CUDNN_CHECK(
        cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one));
    RILL_CUDNN_CHECK(
        cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one));
    RILL_CUDNN_CHECK(cudnnBackendFinalize(op));
    ops_.push_back(op);
    return {};
  }

  // pointwise() into a new virtual tensor of type `out` shaped `dim`; returns that tensor.
  Result<cudnnBackendDescriptor_t> pw(cudnnPointwiseMode_t mode, cudnnDataType_t math, cudnnDataType_t out,
                                      const Dims& dim, cudnnBackendDescriptor_t x,
                                      cudnnBackendDescriptor_t b = nullptr,
                                      cudnnBackendDescriptor_t t = nullptr, int64_t axis = -1) {
    RILL_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t y, virt(out, dim));
    RILL_TRY(pointwise(mode, math, x, b, t, y, axis));
    return y;
  }

  // c = a b (batched over the two leading dims), fp32 accumulation; the GEMM's m / n / k per batch entry from
  // the override tensors where given (the real sequence lengths).
  Status matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c,
                cudnnBackendDescriptor_t m_override, cudnnBackendDescriptor_t n_override,
                cudnnBackendDescriptor_t k_override) {
    RILL_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t mm, make(CUDNN_BACKEND_MATMUL_DESCRIPTOR));
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    RILL_CUDNN_CHECK(
        cudnnBackendSetAttribute(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32));
    RILL_CUDNN_CHECK(cudnnBackendFinalize(mm));
    RILL_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op, make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR));
    RILL_CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a));
    RILL_CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
    RILL_CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c));
    RILL_CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_DESC,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm));
    if (m_override)
      RILL_CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m_override));
    if (n_override)
      RILL_CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n_override));
    if (k_override)
      RILL_CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k_override));
    RILL_CUDNN_CHECK(cudnnBackendFinalize(op));
    ops_.push_back(op);
    return {};
  }

  // y = reduce(x) over the dims where y is 1, in fp32.
  Status reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    RILL_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t rd, make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR));
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    RILL_CUDNN_CHECK(cudnnBackendSetAttribute(rd, CUDNN_ATTR_REDUCTION_OPERATOR,
                                              CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode));
    RILL_CUDNN_CHECK(
        cudnnBackendSetAttribute(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32));
    RILL_CUDNN_CHECK(cudnnBackendFinalize(rd));
    RILL_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op, make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR));
    RILL_CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    RILL_CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    RILL_CUDNN_CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd));
    RILL_CUDNN_CHECK(cudnnBackendFinalize(op));
    ops_.push_back(op);
    return {};
  }

  // The operation graph of every op added so far, then the first engine configuration (heuristics mode A,
  // then the fallback list) whose execution plan finalises. Unimplemented when none does.
  Status finish() {
    RILL_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t graph, make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
    RILL_CUDNN_CHECK(
        cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_));
    RILL_CUDNN_CHECK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops_.size()),
                                              ops_.data()));
    RILL_CUDNN_CHECK(cudnnBackendFinalize(graph));
    Status last = unimplemented("cuDNN: no engine configuration for the MLA prefill attention graph");
    for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      Status st = try_heuristics(graph, mode);
      if (st.ok()) return {};
      last = std::move(st);
    }
    return last;
  }

 private:
  Status try_heuristics(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode) {
    RILL_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t heur, make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR));
    RILL_CUDNN_CHECK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
    RILL_CUDNN_CHECK(
        cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
    RILL_CUDNN_CHECK(cudnnBackendFinalize(heur));
    int64_t count = 0;
    RILL_CUDNN_CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
    if (count <= 0)
      return unimplemented("cuDNN heuristics (mode {}) found no engine for the graph", int(mode));
    std::vector<cudnnBackendDescriptor_t> cfgs;
    for (int64_t i = 0; i < count; ++i) {
      RILL_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t c, make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
      cfgs.push_back(c);
    }
    int64_t got = 0;
    RILL_CUDNN_CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs.data()));
    Status last = unimplemented("cuDNN heuristics (mode {}) returned no engine configuration", int(mode));
    for (int64_t i = 0; i < got; ++i) {
      cudnnBackendDescriptor_t plan = nullptr;
      RILL_CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan));
      Desc owned(plan);
      RILL_CUDNN_CHECK(
          cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_));
      RILL_CUDNN_CHECK(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[size_t(i)]));
      const cudnnStatus_t st =
          cudnnBackendFinalize(plan);  // an engine that cannot run this graph says so here
      if (st != CUDNN_STATUS_SUCCESS) {
        last = cudnn_error(st, "cudnnBackendFinalize(execution plan)");
        continue;
      }
      int64_t ws = 0;
      RILL_CUDNN_CHECK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                CUDNN_TYPE_INT64, 1, &got, &ws));
      p_->plan = plan;
      p_->workspace = ws;
      p_->descs.push_back(std::move(owned));
      return {};
    }
    return last;
  }

  cudnnHandle_t handle_;
  CudnnPlan* p_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_ = kFirstVirtual;
};

// The graph of the file comment for shape `s` into `p` (without `ragged` / `padding`, the diagnostic forms of
// cudnn_sdpa.h's SdpaShape).
Status build_graph(cudnnHandle_t handle, const SdpaShape& s, CudnnPlan* p) {
  if (!s.padding && s.max_q != s.max_kv)
    return invalid_argument("mla prefill (cuDNN): a graph without padding needs max_q == max_kv ({} vs {})",
                            s.max_q, s.max_kv);
  GraphBuilder g(handle, p);
  const int64_t B = s.batch, H = s.n_heads, Sq = s.max_q, Skv = s.max_kv;
  const Dims one{1, 1, 1, 1};
  const Dims seq_dim{B, 1, 1, 1}, off_dim{B + 1, 1, 1, 1};
  // Lengths (int32, cuDNN's seq_len type) and ragged offsets (int64 elements: the type cuDNN's frontend tests
  // and TransformerEngine bind from cuDNN 9.5 on; int32 offsets are only exercised there on older releases).
  cudnnBackendDescriptor_t seq_q = nullptr, seq_kv = nullptr;
  cudnnBackendDescriptor_t off_q = nullptr, off_k = nullptr, off_v = nullptr, off_o = nullptr,
                           off_stats = nullptr;
  if (s.padding) {
    RILL_ASSIGN_OR_RETURN(seq_q, g.tensor({kUidSeqQ, CUDNN_DATA_INT32, seq_dim, one}));
    RILL_ASSIGN_OR_RETURN(seq_kv, g.tensor({kUidSeqKv, CUDNN_DATA_INT32, seq_dim, one}));
  }
  if (s.ragged) {
    RILL_ASSIGN_OR_RETURN(off_q, g.tensor({kUidOffQ, CUDNN_DATA_INT64, off_dim, one}));
    RILL_ASSIGN_OR_RETURN(off_k, g.tensor({kUidOffK, CUDNN_DATA_INT64, off_dim, one}));
    RILL_ASSIGN_OR_RETURN(off_v, g.tensor({kUidOffV, CUDNN_DATA_INT64, off_dim, one}));
    RILL_ASSIGN_OR_RETURN(off_o, g.tensor({kUidOffO, CUDNN_DATA_INT64, off_dim, one}));
    RILL_ASSIGN_OR_RETURN(off_stats, g.tensor({kUidOffStats, CUDNN_DATA_INT64, off_dim, one}));
  }
  // Q [B, H, Sq, 192] and O [B, H, Sq, 128] as rill's activations lie; K^T [B, H, 192, Skv] over the built K
  // [rows, H, 192] (the transpose is a stride swap); V [B, H, Skv, 128] read in place from kvx.
  const int64_t k_row = H * kQk, v_row = H * kKvbRows;
  RILL_ASSIGN_OR_RETURN(auto q, g.tensor({kUidQ,
                                          CUDNN_DATA_BFLOAT16,
                                          {B, H, Sq, kQk},
                                          {Sq * s.q_row, s.q_head, s.q_row, 1},
                                          false,
                                          false,
                                          off_q}));
  RILL_ASSIGN_OR_RETURN(
      auto kt,
      g.tensor(
          {kUidK, CUDNN_DATA_BFLOAT16, {B, H, kQk, Skv}, {Skv * k_row, kQk, 1, k_row}, false, false, off_k}));
  RILL_ASSIGN_OR_RETURN(auto v, g.tensor({kUidV,
                                          CUDNN_DATA_BFLOAT16,
                                          {B, H, Skv, kV},
                                          {Skv * v_row, kKvbRows, v_row, 1},
                                          false,
                                          false,
                                          off_v}));
  RILL_ASSIGN_OR_RETURN(auto o, g.tensor({kUidO,
                                          CUDNN_DATA_BFLOAT16,
                                          {B, H, Sq, kV},
                                          {Sq * s.out_row, kV, s.out_row, 1},
                                          false,
                                          false,
                                          off_o}));
  // Scalars passed by value at execution (host pointers in the variant pack).
  RILL_ASSIGN_OR_RETURN(auto scale, g.tensor({kUidScale, CUDNN_DATA_FLOAT, one, one, false, true}));
  RILL_ASSIGN_OR_RETURN(auto mask_causal,
                        g.tensor({kUidMaskCausal, CUDNN_DATA_FLOAT, one, one, false, true}));

  const Dims sdim{B, H, Sq, Skv}, rdim{B, H, Sq, 1};
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, b8 = CUDNN_DATA_BOOLEAN;
  // S = Q K^T over the real lengths (m, n overrides), then the scale.
  RILL_ASSIGN_OR_RETURN(auto s0, g.virt(f32, sdim));
  RILL_TRY(g.matmul(q, kt, s0, seq_q, seq_kv, nullptr));
  RILL_ASSIGN_OR_RETURN(auto s1, g.pw(CUDNN_POINTWISE_MUL, f32, f32, sdim, s0, scale));
  cudnnBackendDescriptor_t s2 = s1;
  if (s.padding) {
    // Padding mask: rows and columns past the batch entry's lengths.
    RILL_ASSIGN_OR_RETURN(auto mask_pad, g.tensor({kUidMaskPad, CUDNN_DATA_FLOAT, one, one, false, true}));
    RILL_ASSIGN_OR_RETURN(auto row, g.pw(CUDNN_POINTWISE_GEN_INDEX, i32, i32, sdim, s1, nullptr, nullptr, 2));
    RILL_ASSIGN_OR_RETURN(auto col, g.pw(CUDNN_POINTWISE_GEN_INDEX, i32, i32, sdim, s1, nullptr, nullptr, 3));
    RILL_ASSIGN_OR_RETURN(auto row_in, g.pw(CUDNN_POINTWISE_CMP_LT, b8, b8, sdim, row, seq_q));
    RILL_ASSIGN_OR_RETURN(auto col_in, g.pw(CUDNN_POINTWISE_CMP_LT, b8, b8, sdim, col, seq_kv));
    RILL_ASSIGN_OR_RETURN(auto in, g.pw(CUDNN_POINTWISE_LOGICAL_AND, b8, b8, sdim, row_in, col_in));
    RILL_ASSIGN_OR_RETURN(s2, g.pw(CUDNN_POINTWISE_BINARY_SELECT, f32, f32, sdim, s1, mask_pad, in));
  }
  // Bottom-right causal mask: key col is visible to query row when row + seq_kv - seq_q >= col (without
  // padding, max_q == max_kv: row >= col).
  RILL_ASSIGN_OR_RETURN(auto crow, g.pw(CUDNN_POINTWISE_GEN_INDEX, f32, i32, sdim, s2, nullptr, nullptr, 2));
  cudnnBackendDescriptor_t crow_pos = crow;
  if (s.padding) {
    RILL_ASSIGN_OR_RETURN(auto crow_kv, g.pw(CUDNN_POINTWISE_ADD, i32, i32, sdim, crow, seq_kv));
    RILL_ASSIGN_OR_RETURN(crow_pos, g.pw(CUDNN_POINTWISE_SUB, i32, i32, sdim, crow_kv, seq_q));
  }
  RILL_ASSIGN_OR_RETURN(auto ccol, g.pw(CUDNN_POINTWISE_GEN_INDEX, f32, i32, sdim, s2, nullptr, nullptr, 3));
  RILL_ASSIGN_OR_RETURN(auto visible, g.pw(CUDNN_POINTWISE_CMP_GE, b8, b8, sdim, crow_pos, ccol));
  RILL_ASSIGN_OR_RETURN(auto s3,
                        g.pw(CUDNN_POINTWISE_BINARY_SELECT, f32, f32, sdim, s2, mask_causal, visible));
  // Softmax over keys; P in bf16 (the second GEMM's input type).
  RILL_ASSIGN_OR_RETURN(auto mx, g.virt(f32, rdim));
  RILL_TRY(g.reduction(CUDNN_REDUCE_TENSOR_MAX, s3, mx));
  RILL_ASSIGN_OR_RETURN(auto centred, g.pw(CUDNN_POINTWISE_SUB, f32, f32, sdim, s3, mx));
  RILL_ASSIGN_OR_RETURN(auto e, g.pw(CUDNN_POINTWISE_EXP, f32, f32, sdim, centred));
  RILL_ASSIGN_OR_RETURN(auto sum, g.virt(f32, rdim));
  RILL_TRY(g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum));
  // The softmax statistics (max + log(sum) per query row and head, fp32 [T, H] token-major, ragged like Q) as
  // a real output: cuDNN 9.14's Hopper flash engine for d_qk 192 / d_v 128 writes them whether or not the
  // graph asks (through an unset pointer when it does not: the illegal access of the first cuDNN runs, caught
  // by compute-sanitizer as 4-byte stores one row apart from ..._flash_fprop_wgmma_f16_knob_7_64x128x192).
  // TransformerEngine always builds this training-form graph.
  RILL_ASSIGN_OR_RETURN(auto log_sum, g.pw(CUDNN_POINTWISE_LOG, f32, f32, rdim, sum));
  RILL_ASSIGN_OR_RETURN(
      auto stats, g.tensor({kUidStats, CUDNN_DATA_FLOAT, rdim, {Sq * H, 1, H, 1}, false, false, off_stats}));
  RILL_TRY(g.pointwise(CUDNN_POINTWISE_ADD, f32, mx, log_sum, nullptr, stats));
  RILL_ASSIGN_OR_RETURN(auto prob, g.pw(CUDNN_POINTWISE_DIV, f32, CUDNN_DATA_BFLOAT16, sdim, e, sum));
  // O = P V over the real lengths (m, k overrides).
  RILL_TRY(g.matmul(prob, v, o, seq_q, nullptr, seq_kv));
  return g.finish();
}

}  // namespace

struct CudnnSdpa::Impl {
  int device = 0;
  cudnnHandle_t handle = nullptr;
  // Built plans and refused shapes (their status, so a refused bucket is not re-planned every step).
  struct Entry {
    SdpaShape shape;
    Status status;
    std::unique_ptr<CudnnPlan> plan;
  };
  std::vector<Entry> entries;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  ~Impl() {
    entries.clear();  // descriptors before the handle they were made with
    if (handle) cudnnDestroy(handle);
    if (workspace) cudaFree(workspace);
  }

  Entry* find(const SdpaShape& s) {
    for (Entry& e : entries)
      if (e.shape == s) return &e;
    return nullptr;
  }
};

CudnnSdpa::CudnnSdpa() : impl_(std::make_unique<Impl>()) {}
CudnnSdpa::~CudnnSdpa() = default;

Result<std::unique_ptr<CudnnSdpa>> CudnnSdpa::create(int device) {
  std::unique_ptr<CudnnSdpa> r(new CudnnSdpa());
  r->impl_->device = device;
  return r;
}

std::string CudnnSdpa::describe() const {
  const size_t v = cudnnGetVersion();
  size_t built = 0;
  for (const auto& e : impl_->entries) built += e.plan != nullptr;
  return fmt::format("cuDNN {}.{}.{} ({} plan{})", v / 10000, v / 100 % 100, v % 100, built,
                     built == 1 ? "" : "s");
}

Status CudnnSdpa::prepare(const SdpaShape& s) {
  Impl& m = *impl_;
  if (Impl::Entry* e = m.find(s)) return e->status;
  const size_t version = cudnnGetVersion();
  Status st;
  auto plan = std::make_unique<CudnnPlan>();
  if (version < 90000) {
    st = unimplemented("cuDNN {} is older than 9.0: no ragged bottom-right SDPA", version);
  } else if (version == 91000 || version == 91001) {
    // Known bf16 SDPA forward bugs in these two releases (cuDNN's own frontend refuses them too).
    st = unimplemented("cuDNN {}: SDPA forward is refused on 9.10.0/9.10.1 (known bugs; use 9.10.2+)",
                       version);
  } else {
    if (!m.handle) {
      const cudnnStatus_t h = cudnnCreate(&m.handle);
      if (h != CUDNN_STATUS_SUCCESS) {
        m.handle = nullptr;
        return cudnn_error(h, "cudnnCreate");  // not cached: a later call may succeed
      }
      RILL_LOG_INFO("mla prefill: cuDNN handle made on device {} ({})", m.device, describe());
    }
    const auto t0 = std::chrono::steady_clock::now();
    st = build_graph(m.handle, s, plan.get());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (st.ok())
      RILL_LOG_INFO(
          "mla prefill: cuDNN plan for {} heads, batch {}, queries <= {}, keys <= {}{}{} built in {:.0f} ms "
          "({} workspace bytes)",
          s.n_heads, s.batch, s.max_q, s.max_kv, s.ragged ? "" : ", not ragged",
          s.padding ? "" : ", no padding", ms, plan->workspace);
  }
  if (!st.ok()) {
    RILL_LOG_WARN("mla prefill: cuDNN has no plan for {} heads, batch {}, queries <= {}, keys <= {}: {}",
                  s.n_heads, s.batch, s.max_q, s.max_kv, st.message());
    plan.reset();
  }
  m.entries.push_back({s, st, std::move(plan)});
  return st;
}

Status CudnnSdpa::run(const SdpaShape& s, const SdpaArgs& a, cudaStream_t stream) {
  Impl& m = *impl_;
  Impl::Entry* e = m.find(s);
  if (!e) return internal_error("mla prefill (cuDNN): run() before prepare() for this shape");
  RILL_TRY(e->status);
  const CudnnPlan& p = *e->plan;
  if (size_t(p.workspace) > m.workspace_bytes) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    RILL_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone)
      return internal_error("mla prefill (cuDNN): a new plan needs {} workspace bytes inside a graph capture",
                            p.workspace);
    RILL_CUDA_CHECK(cudaStreamSynchronize(stream));  // the old buffer may still be read by queued work
    if (m.workspace) RILL_CUDA_CHECK(cudaFree(m.workspace));
    m.workspace = nullptr;
    m.workspace_bytes = 0;
    RILL_CUDA_CHECK(cudaMalloc(&m.workspace, size_t(p.workspace)));
    m.workspace_bytes = size_t(p.workspace);
  }
  // Masked scores: -inf, except that cuDNN before 9.10 wants the lowest finite float (its frontend's choice).
  const float masked = cudnnGetVersion() < 91000 ? std::numeric_limits<float>::lowest()
                                                 : -std::numeric_limits<float>::infinity();
  float scale = a.scale;
  // The non-virtual tensors of this shape's graph (build_graph) and their data.
  std::vector<int64_t> uids{kUidQ, kUidK, kUidV, kUidO, kUidStats, kUidScale, kUidMaskCausal};
  std::vector<void*> ptrs{
      const_cast<void*>(a.q),     const_cast<void*>(a.k), const_cast<void*>(a.v), a.out, a.stats, &scale,
      const_cast<float*>(&masked)};
  if (s.padding) {
    uids.insert(uids.end(), {kUidSeqQ, kUidSeqKv, kUidMaskPad});
    ptrs.insert(ptrs.end(),
                {const_cast<int32_t*>(a.seq_q), const_cast<int32_t*>(a.seq_kv), const_cast<float*>(&masked)});
  }
  if (s.ragged) {
    uids.insert(uids.end(), {kUidOffQ, kUidOffK, kUidOffV, kUidOffO, kUidOffStats});
    ptrs.insert(ptrs.end(),
                {const_cast<int64_t*>(a.off_q), const_cast<int64_t*>(a.off_k), const_cast<int64_t*>(a.off_v),
                 const_cast<int64_t*>(a.off_o), const_cast<int64_t*>(a.off_stats)});
  }
  for (const void* ptr : ptrs)
    if (!ptr) return internal_error("mla prefill (cuDNN): a tensor of the graph has no data pointer");
  cudnnBackendDescriptor_t vp = nullptr;
  RILL_CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
  const Desc owned(vp);
  void* ws = m.workspace;
  RILL_CUDNN_CHECK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                            int64_t(uids.size()), uids.data()));
  RILL_CUDNN_CHECK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                            int64_t(ptrs.size()), ptrs.data()));
  RILL_CUDNN_CHECK(
      cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
  RILL_CUDNN_CHECK(cudnnBackendFinalize(vp));
  RILL_CUDNN_CHECK(cudnnSetStream(m.handle, stream));
  RILL_CUDNN_CHECK(cudnnBackendExecute(m.handle, p.plan, vp));
  return {};
}

}  // namespace rill::cuda::mla

#else  // no cuDNN in this build

namespace rill::cuda::mla {

struct CudnnSdpa::Impl {};
CudnnSdpa::CudnnSdpa() = default;
CudnnSdpa::~CudnnSdpa() = default;
Result<std::unique_ptr<CudnnSdpa>> CudnnSdpa::create(int) {
  return unavailable("this build has no cuDNN (RILL_CUDNN=OFF or cuDNN 9 not found at configure time)");
}
Status CudnnSdpa::prepare(const SdpaShape&) {
  return unavailable("this build has no cuDNN");
}
Status CudnnSdpa::run(const SdpaShape&, const SdpaArgs&, cudaStream_t) {
  return unavailable("this build has no cuDNN");
}
std::string CudnnSdpa::describe() const {
  return "no cuDNN";
}

}  // namespace rill::cuda::mla

#endif
