#include "backend/cuda/moe/cublas_grouped.h"

#include <climits>

#include "backend/cuda/common/check.h"

namespace rill::cuda::moe {
namespace {

// cuBLAS's recommendation for Hopper; allocated once so a step never allocates.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

#define RILL_CUBLAS_CHECK(call)                                                               \
  do {                                                                                        \
    const cublasStatus_t rill_st_ = (call);                                                   \
    if (rill_st_ != CUBLAS_STATUS_SUCCESS)                                                    \
      return ::rill::internal_error("{} failed: {}", #call, cublasGetStatusString(rill_st_)); \
  } while (0)

}  // namespace

Result<std::unique_ptr<CublasGroupedGemm>> CublasGroupedGemm::create(int max_experts) {
  std::unique_ptr<CublasGroupedGemm> g(new CublasGroupedGemm());
  g->max_experts_ = max_experts;
  RILL_CUBLAS_CHECK(cublasCreate(&g->handle_));
  RILL_CUDA_CHECK(cudaMalloc(&g->workspace_, kWorkspaceBytes));
  RILL_CUBLAS_CHECK(cublasSetWorkspace(g->handle_, g->workspace_, kWorkspaceBytes));
  RILL_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&g->pinned_offsets_), size_t(max_experts + 1) * 4));
  RILL_CUDA_CHECK(cudaEventCreateWithFlags(&g->copied_, cudaEventDisableTiming));
  return g;
}

CublasGroupedGemm::~CublasGroupedGemm() {
  if (copied_) cudaEventDestroy(copied_);
  if (pinned_offsets_) cudaFreeHost(pinned_offsets_);
  if (handle_) cublasDestroy(handle_);
  if (workspace_) cudaFree(workspace_);
}

Status CublasGroupedGemm::copy_offsets(const int32_t* offsets, int E, cudaStream_t stream) {
  if (E < 0 || E > max_experts_)
    return invalid_argument("moe_experts: {} experts, the cuBLAS grouped path was made for at most {}", E,
                            max_experts_);
  RILL_CUDA_CHECK(
      cudaMemcpyAsync(pinned_offsets_, offsets, size_t(E + 1) * 4, cudaMemcpyDeviceToHost, stream));
  RILL_CUDA_CHECK(cudaEventRecord(copied_, stream));
  copied_experts_ = E;
  return {};
}

Result<const int32_t*> CublasGroupedGemm::wait_offsets() {
  if (copied_experts_ < 0) return internal_error("moe_experts: wait_offsets without copy_offsets");
  RILL_CUDA_CHECK(cudaEventSynchronize(copied_));
  copied_experts_ = -1;
  return static_cast<const int32_t*>(pinned_offsets_);
}

Status CublasGroupedGemm::run(const int* m, int groups_in, int n, int k, const void* const* a, int64_t lda,
                              const void* const* w, int64_t ldw, void* const* c, int64_t ldc,
                              cudaStream_t stream) {
  if (lda > INT_MAX || ldw > INT_MAX || ldc > INT_MAX)
    return invalid_argument("moe_experts: leading dimensions {} / {} / {} exceed cuBLAS's int", lda, ldw,
                            ldc);
  if (groups_in <= 0) return {};
  const size_t groups = size_t(groups_in);
  n_.assign(groups, n);
  k_.assign(groups, k);
  lda_.assign(groups, int(lda));
  ldw_.assign(groups, int(ldw));
  ldc_.assign(groups, int(ldc));
  ones_.assign(groups, 1);
  alpha_.assign(groups, 1.0f);
  beta_.assign(groups, 0.0f);
  trans_w_.assign(groups, CUBLAS_OP_T);
  trans_a_.assign(groups, CUBLAS_OP_N);
  RILL_CUBLAS_CHECK(cublasSetStream(handle_, stream));
  // Column-major view of row-major C_g [m_g, n] = A_g W_g^T: C_g^T [n, m_g] = op_T(W_g) [n, k] . A_g^T [k,
  // m_g], where W_g's rows (ldw) and A_g's rows (lda) are column-major matrices [k, n] and [k, m_g].
  RILL_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(handle_, trans_w_.data(), trans_a_.data(), n_.data(), m,
                                               k_.data(), alpha_.data(), w, CUDA_R_16BF, ldw_.data(), a,
                                               CUDA_R_16BF, lda_.data(), beta_.data(), c, CUDA_R_16BF,
                                               ldc_.data(), int(groups), ones_.data(), CUBLAS_COMPUTE_32F));
  return {};
}

}  // namespace rill::cuda::moe
