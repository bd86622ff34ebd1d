// GemmRunner on cuBLASLt. Row-major y[M,N] = x[M,K] W[N,K]^T is computed as the column-major product
// y^T[N,M] = W[N,K] x^T: W seen column-major is [K,N] with ld = its row stride (op T), x is [K,M] with
// ld = its row stride (op N), y^T is [N,M] with ld = y's row stride. This "TN" form is cuBLASLt's fastest and
// needs no copies for strided activations (halves or column slices of a wider buffer).
//
// Plans: one per (M, N, K, row strides, output dtype, pointer alignments), holding the descriptors and the
// heuristic's candidate algorithms. The heuristic is told the real pointer/stride alignment (its default
// assumes 256-byte aligned buffers, which column slices are not). The first call of a plan picks its
// algorithm: the first candidate that launches, or with autotuning the fastest of the top kTuneCandidates,
// timed once with events (a host sync, so it is skipped while the stream is being captured into a graph).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "backend/cuda/common/check.h"
#include "backend/cuda/gemm/fp8_dequant.h"
#include "backend/cuda/gemm/fp8_native.h"
#include "backend/cuda/gemm/gemm_runner.h"
#include "backend/cuda/gemm/gemv.h"

namespace rill::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;
constexpr int kHeuristicCandidates = 8;
constexpr int kTuneCandidates = 4;
constexpr int kTuneRuns = 3;

#define RILL_CUBLAS_CHECK(call, what)                                                                     \
  do {                                                                                                    \
    const cublasStatus_t rill_st_ = (call);                                                               \
    if (rill_st_ != CUBLAS_STATUS_SUCCESS)                                                                \
      return ::rill::internal_error("{}: {} failed: {}", what, #call, cublasLtGetStatusString(rill_st_)); \
  } while (0)

// Largest power of two (<= 256) dividing both the address and the row pitch in bytes.
uint32_t alignment_of(const void* p, int64_t ld_bytes) {
  const uint64_t v = uint64_t(reinterpret_cast<uintptr_t>(p)) | uint64_t(ld_bytes) | 256u;
  return uint32_t(v & (~v + 1));
}

struct PlanKey {
  int64_t m, n, k, ldx, ldw, ldo;
  DType out;
  uint32_t align_x, align_w, align_o;
  auto tie() const { return std::tie(m, n, k, ldx, ldw, ldo, out, align_x, align_w, align_o); }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t w = nullptr, x = nullptr, y = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;
  int chosen = -1;  // index into candidates once an algorithm has run
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (w) cublasLtMatrixLayoutDestroy(w);
    if (x) cublasLtMatrixLayoutDestroy(x);
    if (y) cublasLtMatrixLayoutDestroy(y);
  }
};

class CublasLtRunner final : public GemmRunner {
 public:
  ~CublasLtRunner() override {
    plans_.clear();
    fp8_plans_.clear();
    if (workspace_) cudaFree(workspace_);
    if (handle_) cublasLtDestroy(handle_);
  }

  Status init(int device) {
    RILL_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
    RILL_CUBLAS_CHECK(cublasLtCreate(&handle_), "gemm runner");
    RILL_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
    return {};  // autotuning: set_autotune (CudaBackendOptions::gemm_autotune)
  }

  void set_autotune(bool on) override {
    std::lock_guard<std::mutex> lock(mu_);
    autotune_ = on;
  }

  void set_fp8_native(bool on) override {
    std::lock_guard<std::mutex> lock(mu_);
    fp8_native_ = on;
  }

  Status run(const backend::GemmArgs& a, cudaStream_t stream) override {
    const backend::LinearWeight& lw = *a.w;
    const int64_t M = a.x.size(0), K = a.x.size(1), N = lw.out_features();
    const char* out_name = a.out.dtype == DType::F32 ? "F32" : "BF16";
    if (lw.format == backend::WeightFormat::Mxfp4)
      return unimplemented(
          "gemm [{} x {}] x [{} x {}]^T: MXFP4 weights need the weight-only kernel, which the "
          "CUDA backend does not have yet",
          M, K, N, K);
    if (lw.format == backend::WeightFormat::Fp8) return run_fp8(a, stream);
    if (lw.weight.dtype != DType::BF16)
      return invalid_argument("gemm [{} x {}] x [{} x {}]^T: CUDA weights must be BF16, got {}", M, K, N, K,
                              dtype_name(lw.weight.dtype));
    if (a.x.dtype != DType::BF16 || (a.out.dtype != DType::BF16 && a.out.dtype != DType::F32))
      return invalid_argument("gemm [{} x {}] x [{} x {}]^T: x must be BF16 and out BF16 or F32", M, K, N, K);
    if (lw.weight.size(1) > 1 && lw.weight.stride(1) != 1)
      return invalid_argument("gemm [{} x {}] x [{} x {}]^T: weight rows must be contiguous", M, K, N, K);
    if (M == 0) return {};
    if (N == 0 || K == 0) return invalid_argument("gemm [{} x {}] x [{} x {}]^T: empty operand", M, K, N, K);
    if (gemv_eligible(a)) return launch_gemv(a, sm_count_, stream);  // decode-sized M: the bandwidth-bound kernel

    const size_t out_size = dtype_size(a.out.dtype);
    PlanKey key;
    key.m = M;
    key.n = N;
    key.k = K;
    // A single row's stride is meaningless to the caller but cuBLASLt wants ld >= rows.
    key.ldx = M == 1 ? std::max<int64_t>(a.x.stride(0), K) : a.x.stride(0);
    key.ldw = N == 1 ? std::max<int64_t>(lw.weight.stride(0), K) : lw.weight.stride(0);
    key.ldo = M == 1 ? std::max<int64_t>(a.out.stride(0), N) : a.out.stride(0);
    if (key.ldx < K || key.ldw < K || key.ldo < N)
      return invalid_argument("gemm [{} x {}] x [{} x {}]^T: row strides (x {}, w {}, out {}) overlap rows",
                              M, K, N, K, key.ldx, key.ldw, key.ldo);
    key.out = a.out.dtype;
    key.align_x = alignment_of(a.x.data, key.ldx * 2);
    key.align_w = alignment_of(lw.weight.data, key.ldw * 2);
    key.align_o = alignment_of(a.out.data, key.ldo * int64_t(out_size));

    std::lock_guard<std::mutex> lock(mu_);
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      auto plan = std::make_unique<Plan>();
      const Status st = build(key, plan.get());
      if (!st.ok()) return st.with_context(shape_name(key, out_name));
      it = plans_.emplace(key, std::move(plan)).first;
    }
    Plan& p = *it->second;
    if (p.chosen >= 0) {
      const cublasStatus_t st = matmul(p, p.chosen, a, stream);
      if (st != CUBLAS_STATUS_SUCCESS)
        return internal_error("{}: cublasLtMatmul failed: {}", shape_name(key, out_name),
                              cublasLtGetStatusString(st));
      return {};
    }
    return choose(p, key, a, stream, out_name);
  }

 private:
  // FP8 weights: the FP8 GEMV up to kFp8GemvMaxRows rows; above, with a scratch arena, the weight
  // dequantised to a bf16 copy in scratch (fp8_dequant.h, sized by gemm_scratch_bytes) and cuBLASLt's bf16
  // GEMM on it; without one, the GEMV kGemvMaxRows rows at a time (correct, slow).
  Status run_fp8(const backend::GemmArgs& a, cudaStream_t stream) {
    const int64_t M = a.x.size(0), K = a.x.size(1), N = a.w->out_features();
    if (M > kFp8GemvMaxRows && a.scratch != nullptr && fp8_native_on() && fp8_native_eligible(a)) {
      const size_t mark = a.scratch->used();
      const Fp8NativeStage probe = fp8_native_stage(M, *a.w, nullptr);
      const Fp8NativeStage stage =
          fp8_native_stage(M, *a.w, a.scratch->alloc(DType::U8, {int64_t(probe.bytes)}).data);
      Status st = launch_fp8_native_stage(a, stage, stream);
      bool ran = false;
      if (st.ok()) st = run_fp8_native(a, stage, stream, ran);
      a.scratch->release_to(mark);
      if (!st.ok() || ran) return st;
      // No cuBLASLt algorithm for this shape: the bf16 copy below (the staging kernels' output goes unused).
    }
    if (M > kFp8GemvMaxRows && a.scratch != nullptr) {
      const size_t mark = a.scratch->used();
      const TensorView copy = a.scratch->alloc(DType::U8, {int64_t(fp8_dequant_bytes(*a.w))});
      RILL_TRY(launch_fp8_dequant_bf16(*a.w, copy.data, stream));
      backend::LinearWeight bf16_w;
      bf16_w.weight = TensorView::make(copy.data, DType::BF16, {N, K}, Device::Cuda);
      const Status st = run({a.x, &bf16_w, a.out}, stream);
      a.scratch->release_to(mark);  // later work on the stream is ordered after the GEMM
      return st;
    }
    for (int64_t m0 = 0; m0 < M; m0 += kGemvMaxRows) {
      const int64_t rows = std::min<int64_t>(kGemvMaxRows, M - m0);
      const backend::GemmArgs part{a.x.narrow(0, m0, rows), a.w, a.out.narrow(0, m0, rows)};
      if (!gemv_eligible(part))
        return invalid_argument(
            "gemm [{} x {}] x [{} x {}]^T: this FP8 weight or its operands do not fit the FP8 "
            "GEMV (K % 8, 8-byte aligned rows, block columns a multiple of 8)",
            M, K, N, K);
      RILL_TRY(launch_gemv(part, sm_count_, stream));
    }
    return {};
  }

  bool fp8_native_on() {
    std::lock_guard<std::mutex> lock(mu_);
    return fp8_native_;
  }

  // cuBLASLt's FP8 matmul, TN as the bf16 plans: A = the weight's E4M3 codes [K, N] (op T) with 128 x 128
  // block scales (BLK128x128_32F), B = the staged codes [K, M] with one scale per 128 k of each token
  // (VEC128_32F), C = D = out in bf16, fp32 accumulation. Sets `ran` when it enqueued the matmul; a shape
  // cuBLASLt has no algorithm for is remembered and left to the caller's fallback.
  Status run_fp8_native(const backend::GemmArgs& a, const Fp8NativeStage& s, cudaStream_t stream, bool& ran) {
    const backend::LinearWeight& lw = *a.w;
    PlanKey key;
    key.m = a.x.size(0);
    key.n = lw.out_features();
    key.k = a.x.size(1);
    key.ldx = key.k;
    key.ldw = lw.weight.stride(0);
    key.ldo = key.m == 1 ? std::max<int64_t>(a.out.stride(0), key.n) : a.out.stride(0);
    key.out = a.out.dtype;
    key.align_x = alignment_of(s.codes, key.ldx);
    key.align_w = alignment_of(lw.weight.data, key.ldw);
    key.align_o = alignment_of(a.out.data, key.ldo * 2);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = fp8_plans_.find(key);
    if (it == fp8_plans_.end()) {
      auto plan = std::make_unique<Plan>();
      if (!build_fp8(key, plan.get()).ok()) plan->chosen = -2;  // unsupported: the caller falls back
      it = fp8_plans_.emplace(key, std::move(plan)).first;
    }
    Plan& p = *it->second;
    if (p.chosen == -2) return {};
    const void* w_scales = s.w_scales;
    const void* x_scales = s.x_scales;
    RILL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales,
                                                     sizeof(w_scales)),
                      "fp8 gemm");
    RILL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales,
                                                     sizeof(x_scales)),
                      "fp8 gemm");
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t last = CUBLAS_STATUS_NOT_SUPPORTED;
    const int first = p.chosen >= 0 ? p.chosen : 0,
              end = p.chosen >= 0 ? p.chosen + 1 : int(p.candidates.size());
    for (int i = first; i < end; ++i) {
      last =
          cublasLtMatmul(handle_, p.desc, &alpha, lw.weight.data, p.w, s.codes, p.x, &beta, a.out.data, p.y,
                         a.out.data, p.y, &p.candidates[size_t(i)].algo, workspace_, kWorkspaceBytes, stream);
      if (last == CUBLAS_STATUS_SUCCESS) {
        p.chosen = i;
        ran = true;
        return {};
      }
    }
    if (p.chosen >= 0)
      return internal_error("{} (fp8): cublasLtMatmul failed: {}", shape_name(key, "BF16"),
                            cublasLtGetStatusString(last));
    p.chosen = -2;  // no candidate ran: fall back from now on
    return {};
  }

  Status build_fp8(const PlanKey& k, Plan* p) {
    RILL_TRY(describe(k, CUDA_R_8F_E4M3, CUDA_R_16BF, p, "fp8 plan"));
    const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                  b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    RILL_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)),
        "fp8 plan");
    RILL_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)),
        "fp8 plan");
    return find_candidates(p, {}, "fp8 plan", "FP8 ");
  }

  static std::string shape_name(const PlanKey& k, const char* out_name) {
    return fmt::format("gemm [{} x {}] x [{} x {}]^T -> {} (row strides x {}, w {}, out {})", k.m, k.k, k.n,
                       k.k, out_name, k.ldx, k.ldw, k.ldo);
  }

  Status build(const PlanKey& k, Plan* p) {
    RILL_TRY(describe(k, CUDA_R_16BF, k.out == DType::F32 ? CUDA_R_32F : CUDA_R_16BF, p, "plan"));
    // A = W, B = x, C = D = y in cuBLASLt's naming.
    const Preference aligns[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, k.align_w},
                                 {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, k.align_x},
                                 {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, k.align_o},
                                 {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, k.align_o}};
    return find_candidates(p, aligns, "plan", "");
  }

  // A plan's descriptor (fp32 compute; W transposed: y = x W^T) and its layouts, column-major: A = W [K x N] and
  // B = x [K x M] of type `in`, C = D = y [N x M] of type `out`.
  static Status describe(const PlanKey& k, cudaDataType_t in, cudaDataType_t out, Plan* p, const char* what) {
    RILL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), what);
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    RILL_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)), what);
    RILL_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)), what);
    RILL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->w, in, uint64_t(k.k), uint64_t(k.n), k.ldw), what);
    RILL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->x, in, uint64_t(k.k), uint64_t(k.m), k.ldx), what);
    RILL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->y, out, uint64_t(k.n), uint64_t(k.m), k.ldo), what);
    return {};
  }

  using Preference = std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t>;
  // The algorithms cuBLASLt's heuristic offers for the described plan that fit the workspace, given the
  // workspace size and `prefs`; none is an error (`kind`: "FP8 " or "").
  Status find_candidates(Plan* p, std::span<const Preference> prefs, const char* what, const char* kind) {
    cublasLtMatmulPreference_t pref = nullptr;
    RILL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref), what);
    std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                    decltype(&cublasLtMatmulPreferenceDestroy)>
        pref_owner(pref, &cublasLtMatmulPreferenceDestroy);
    const uint64_t ws = kWorkspaceBytes;
    RILL_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
        what);
    for (const auto& [attr, value] : prefs)
      RILL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)), what);
    std::vector<cublasLtMatmulHeuristicResult_t> results(kHeuristicCandidates);
    int n_results = 0;
    RILL_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, p->desc, p->w, p->x, p->y, p->y, pref,
                                                     kHeuristicCandidates, results.data(), &n_results),
                      what);
    for (int i = 0; i < n_results; ++i)
      if (results[size_t(i)].state == CUBLAS_STATUS_SUCCESS &&
          results[size_t(i)].workspaceSize <= kWorkspaceBytes)
        p->candidates.push_back(results[size_t(i)]);
    if (p->candidates.empty()) return internal_error("cuBLASLt has no {}algorithm for this shape", kind);
    return {};
  }

  cublasStatus_t matmul(const Plan& p, int algo, const backend::GemmArgs& a, cudaStream_t stream) {
    const float alpha = 1.0f, beta = 0.0f;
    return cublasLtMatmul(handle_, p.desc, &alpha, a.w->weight.data, p.w, a.x.data, p.x, &beta, a.out.data,
                          p.y, a.out.data, p.y, &p.candidates[size_t(algo)].algo, workspace_, kWorkspaceBytes,
                          stream);
  }

  // First call of a plan: keep the first candidate that launches, or (autotune) the fastest of the first few.
  Status choose(Plan& p, const PlanKey& key, const backend::GemmArgs& a, cudaStream_t stream,
                const char* out_name) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    RILL_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    const int n = int(p.candidates.size());
    if (!autotune_ || capture != cudaStreamCaptureStatusNone || n == 1) {
      cublasStatus_t last = CUBLAS_STATUS_NOT_SUPPORTED;
      for (int i = 0; i < n; ++i) {
        last = matmul(p, i, a, stream);
        if (last == CUBLAS_STATUS_SUCCESS) {
          p.chosen = i;
          return {};
        }
      }
      return internal_error("{}: no cuBLASLt algorithm ran (last: {})", shape_name(key, out_name),
                            cublasLtGetStatusString(last));
    }
    cudaEvent_t start = nullptr, stop = nullptr;
    RILL_CUDA_CHECK(cudaEventCreate(&start));
    RILL_CUDA_CHECK(cudaEventCreate(&stop));
    float best_ms = 0;
    int best = -1;
    Status status;
    for (int i = 0; i < std::min(n, kTuneCandidates) && status.ok(); ++i) {
      if (matmul(p, i, a, stream) != CUBLAS_STATUS_SUCCESS) continue;  // warm-up; skips algorithms that fail
      bool ok = cudaEventRecord(start, stream) == cudaSuccess;
      for (int r = 0; r < kTuneRuns && ok; ++r) ok = matmul(p, i, a, stream) == CUBLAS_STATUS_SUCCESS;
      ok = ok && cudaEventRecord(stop, stream) == cudaSuccess && cudaEventSynchronize(stop) == cudaSuccess;
      float ms = 0;
      if (ok && cudaEventElapsedTime(&ms, start, stop) == cudaSuccess && (best < 0 || ms < best_ms)) {
        best = i;
        best_ms = ms;
      }
      const cudaError_t e = cudaGetLastError();
      if (e != cudaSuccess)
        status = internal_error("{}: tuning: {}", shape_name(key, out_name), cudaGetErrorString(e));
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    RILL_TRY(status);
    if (best < 0)
      return internal_error("{}: no cuBLASLt algorithm ran while tuning", shape_name(key, out_name));
    p.chosen = best;
    // The output was written by every timed run; one more run with the winner keeps the result well defined.
    const cublasStatus_t st = matmul(p, best, a, stream);
    if (st != CUBLAS_STATUS_SUCCESS)
      return internal_error("{}: cublasLtMatmul failed: {}", shape_name(key, out_name),
                            cublasLtGetStatusString(st));
    return {};
  }

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  bool autotune_ = false;
  int sm_count_ = 0;  // the device's multiprocessors (the decode GEMV's split)
  bool fp8_native_ = false;
  std::mutex mu_;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
  std::map<PlanKey, std::unique_ptr<Plan>> fp8_plans_;  // chosen -2: no FP8 algorithm, the bf16 copy instead
};

}  // namespace

Result<std::unique_ptr<GemmRunner>> GemmRunner::create(int device) {
  int current = -1;
  RILL_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device)
    return internal_error("GemmRunner::create: device {} is not current ({})", device, current);
  auto r = std::make_unique<CublasLtRunner>();
  RILL_TRY(r->init(device));
  return std::unique_ptr<GemmRunner>(std::move(r));
}

}  // namespace rill::cuda
