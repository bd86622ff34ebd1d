// CudaBackend: the fast path on NVIDIA GPUs (Hopper sm_90a by default). bf16 activations and weights, fp32
// accumulation, fp32 KDA state. Every op runs on one stream; the only host syncs are copy_to_host (reading
// sampled ids) and synchronize(). Each op delegates to its family's launcher (norm.h, kda/kda.h, ...).
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/context.h"

namespace rill::cuda::moe {
class CublasGroupedGemm;
}
namespace rill::cuda::mla {
class CudnnSdpa;
}

namespace rill::cuda {

class CudaBackend final : public backend::Backend {
 public:
  static Result<std::unique_ptr<CudaBackend>> create(int device,
                                                     const backend::CudaBackendOptions& options = {});
  ~CudaBackend() override;

  std::string name() const override { return "cuda:" + std::to_string(ctx_.device); }
  std::string device_description() const override;
  Status bind_thread() override;
  void* native_stream() const override { return ctx_.stream; }
  backend::KernelShapeLimits shape_limits() const override;
  Device device() const override { return Device::Cuda; }
  DType act_dtype() const override { return DType::BF16; }
  std::optional<DType> matrix_dtype() const override { return DType::BF16; }
  bool kda_snapshots_in_step() const override { return true; }  // the chunk recurrence writes them
  bool kda_fuses_decode(const backend::KdaDecodeArgs& a) const override;
  const CudaContext& context() const { return ctx_; }
  // moe_cublas_grouped, moe_cublas_min_pairs, moe_wgmma, moe_wgmma_fp8, moe_wgmma_mxfp4,
  // moe_wgmma_mxfp4_min_pairs, moe_route_gemm_min_tokens and kda_intra_tensor_solve
  // (backend/cuda_backend_options.h) between steps, fp8_gemm and mla_prefill before a step is planned; the
  // other options are fixed when the backend is made.
  Status set_option(const std::string& key, const std::string& value) override;

  Result<backend::DeviceAllocation> allocate(size_t bytes) override;
  std::optional<std::pair<size_t, size_t>> device_memory() const override;
  Status copy_to_device(void* dst, const void* host_src, size_t bytes) override;
  Status copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  Status copy_device_to_device(void* dst, const void* src, size_t bytes) override;
  Status copy_device_to_device_batch(const std::vector<backend::DeviceCopy>& copies) override;
  Status copy_to_device_batch(const std::vector<backend::CopyJob>& jobs,
                              const std::function<void(size_t)>& progress) override;
  Result<backend::DeviceAllocation> allocate_host(size_t bytes) override;
  bool host_memory_pinned() const override { return true; }
  Status copy_host_tier_batch(const std::vector<backend::HostCopy>& copies) override;
  backend::HostTierCopyTotals host_tier_copy_totals() override;
  Status fill_zero(TensorView t) override;
  Status fill_random(TensorView t, uint64_t seed, float lo, float hi) override;
  Status upload_layout(const backend::BatchLayoutHost& host, int block_size,
                       backend::BatchLayout* out) override;
  Status upload_layout_fixed(const backend::BatchLayoutHost& host, int block_size, int block_table_stride,
                             void* dst, size_t bytes, backend::BatchLayout* out) override;
  Result<std::unique_ptr<backend::CapturedWork>> capture(const std::function<Status()>& body) override;
  bool can_capture() const override { return true; }
  int64_t graph_max_expert_pairs(bool quantized_experts) const override;
  Status upload_async(void* dst, const void* host_src, size_t bytes) override;
  Status synchronize() override;
  Result<double> time_ms(const std::function<Status()>& body) override;
  void trace_push(const char* name) override;
  void trace_pop() override;

  // Planning's const scratch-size queries (Backend).
  size_t kda_attention_scratch_bytes(const backend::KdaAttentionArgs& a) const override;
  size_t mla_attention_scratch_bytes(const backend::MlaAttentionArgs& a) const override;
  size_t moe_experts_scratch_bytes(const backend::MoeExpertsArgs& a) const override;
  size_t gemm_scratch_bytes(const backend::GemmArgs& a) const override;
  bool moe_fuses_shared_expert(const backend::MoeExpertsArgs& a) const override;
  bool gemm_group_fuses_norm(const backend::GemmGroupArgs& a) const override;
  bool moe_route_fuses_norm(const backend::MoeRouteArgs& a) const override;
  size_t sample_scratch_bytes(const backend::SampleArgs& a) const override;

 private:
  CudaBackend() = default;
  Status embed_impl(const backend::EmbedArgs& a) override;
  Status rms_norm_impl(const backend::RmsNormArgs& a) override;
  Status add_rms_norm_impl(const backend::AddRmsNormArgs& a) override;
  Status gemm_impl(const backend::GemmArgs& a) override;
  Status gemm_group_impl(const backend::GemmGroupArgs& a) override;
  Status glu_impl(const backend::GluArgs& a) override;
  Status add_impl(const backend::AddArgs& a) override;
  Status sigmoid_gate_impl(const backend::SigmoidGateArgs& a) override;
  Status kda_prepare_impl(const backend::KdaPrepareArgs& a) override;
  Status kda_attention_impl(const backend::KdaAttentionArgs& a) override;
  Status kda_output_impl(const backend::KdaOutputArgs& a) override;
  Status kda_fold_impl(const backend::KdaFoldArgs& a) override;
  Status kda_decode_impl(const backend::KdaDecodeArgs& a) override;
  Status mla_cache_write_impl(const backend::MlaCacheWriteArgs& a) override;
  Status mla_attention_impl(const backend::MlaAttentionArgs& a) override;
  Status moe_route_impl(const backend::MoeRouteArgs& a) override;
  Status moe_experts_impl(const backend::MoeExpertsArgs& a) override;
  Status gather_rows_impl(const backend::GatherRowsArgs& a) override;
  Status attn_res_mix_impl(const backend::AttnResMixArgs& a) override;
  Status sample_impl(const backend::SampleArgs& a) override;
  Status apply_penalties_impl(const backend::PenaltyArgs& a) override;
  Status mask_logits_impl(const backend::TokenMaskArgs& a) override;
  Status nonfinite_rows_impl(const backend::NonfiniteRowsArgs& a) override;
  Status logprobs_impl(const backend::LogprobsArgs& a) override;
  Status quantize_fp8_impl(const backend::QuantizeFp8Args& a) override;

  // Pinned host staging for step metadata and small uploads; an event guards reuse of each half.
  Status stage(const void* host_src, size_t bytes, void* dst);
  // stage() of `rows` rows of `width` bytes, landing `dst_pitch` bytes apart on the device.
  Status stage_pitched(const void* host_src, size_t width, size_t rows, void* dst, size_t dst_pitch);

  CudaContext ctx_;
  std::unique_ptr<GemmRunner> gemm_;
  std::unique_ptr<moe::CublasGroupedGemm> moe_grouped_;
  std::unique_ptr<mla::CudnnSdpa> mla_sdpa_;
  void* pinned_ = nullptr;                    // staging ring, kPinnedBytes
  size_t pinned_half_ = 0, pinned_head_ = 0;  // current half, and the next free byte in it
  cudaEvent_t pinned_free_[2] = {nullptr, nullptr};
  void* layout_dev_ = nullptr;  // device copy of the batch layout arrays
  // The host tier's copies (copy_host_tier_batch): their stream and the events joining it to the compute one.
  cudaStream_t tier_stream_ = nullptr;
  cudaEvent_t tier_ready_ = nullptr, tier_done_ = nullptr;
  // Timing events around each tier batch on its stream, read once passed (host_tier_copy_totals). Never
  // cudaEventQuery: its cudaErrorNotReady must not meet a launch check's cudaGetLastError on the engine
  // thread; events are read with cudaEventSynchronize, on the engine thread only when long passed
  // (kTierTimingsKept).
  struct TierBatchTiming {
    cudaEvent_t start = nullptr, end = nullptr;
    uint64_t to_host = 0, to_device = 0;
  };
  std::mutex tier_timing_mu_;
  std::deque<TierBatchTiming> tier_timings_;
  std::vector<cudaEvent_t> tier_free_events_;
  backend::HostTierCopyTotals tier_totals_;
  // With tier_timing_mu_ held: adds the oldest timings to tier_totals_ until at most `keep` are left.
  void read_tier_timings(size_t keep);
  size_t layout_cap_ = 0;
};

}  // namespace rill::cuda
