// CpuBackend: the fp32 reference (design.md §4-§5). Activations and caches are F32; weights are read in
// their stored dtype and widened exactly. Multi-threaded with the core thread pool; written to be read.
#pragma once

#include "backend/backend.h"

namespace rill::backend {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::Cpu; }
  DType act_dtype() const override { return DType::F32; }
  std::optional<DType> matrix_dtype() const override { return std::nullopt; }
  bool kda_snapshots_in_step() const override { return true; }

  Result<DeviceAllocation> allocate(size_t bytes) override;
  std::optional<size_t> available_memory() const override;  // MemAvailable of /proc/meminfo
  Status copy_to_device(void* dst, const void* host_src, size_t bytes) override;
  Status copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  Status copy_device_to_device(void* dst, const void* src, size_t bytes) override;
  Status fill_zero(TensorView t) override;
  Status fill_random(TensorView t, uint64_t seed, float lo, float hi) override;
  Status upload_layout(const BatchLayoutHost& host, int block_size, BatchLayout* out) override;
  Status upload_async(void* dst, const void* host_src, size_t bytes) override;
  Status synchronize() override { return {}; }

 private:
  Status embed_impl(const EmbedArgs& a) override;
  Status rms_norm_impl(const RmsNormArgs& a) override;
  Status add_rms_norm_impl(const AddRmsNormArgs& a) override;
  Status gemm_impl(const GemmArgs& a) override;
  Status glu_impl(const GluArgs& a) override;
  Status add_impl(const AddArgs& a) override;
  Status sigmoid_gate_impl(const SigmoidGateArgs& a) override;
  Status kda_prepare_impl(const KdaPrepareArgs& a) override;
  Status kda_attention_impl(const KdaAttentionArgs& a) override;
  Status kda_output_impl(const KdaOutputArgs& a) override;
  Status kda_fold_impl(const KdaFoldArgs& a) override;
  Status mla_cache_write_impl(const MlaCacheWriteArgs& a) override;
  Status mla_attention_impl(const MlaAttentionArgs& a) override;
  Status moe_route_impl(const MoeRouteArgs& a) override;
  Status moe_experts_impl(const MoeExpertsArgs& a) override;
  Status gather_rows_impl(const GatherRowsArgs& a) override;
  Status attn_res_mix_impl(const AttnResMixArgs& a) override;
  Status sample_impl(const SampleArgs& a) override;
  Status apply_penalties_impl(const PenaltyArgs& a) override;
  Status mask_logits_impl(const TokenMaskArgs& a) override;
  Status nonfinite_rows_impl(const NonfiniteRowsArgs& a) override;
  Status logprobs_impl(const LogprobsArgs& a) override;
  Status quantize_fp8_impl(const QuantizeFp8Args& a) override;
};

}  // namespace rill::backend
