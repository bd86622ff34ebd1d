// WorkspacePlanner: the backend a planning pass runs on, instead of a mode of the backend being planned
// for. Each op takes from its scratch arena what the planned backend's would (its const scratch-size
// queries, Backend::*_scratch_bytes) and returns without checking or running anything, so a forward pass
// over a measuring Arena yields the step workspace a step of that shape needs (Model::reserve_workspace),
// and one op over one yields that op's scratch (tests, kernel labs). Kernel-path choices that change what
// an op takes (kda_fuses_decode, moe_fuses_shared_expert) are the planned backend's, asked const; nothing
// of it changes, so planning can run beside its steps. Data movement does nothing: a planning pass moves
// no data, and layouts are planned from their host side (layout_scalars).
#pragma once

#include "backend/backend.h"

namespace rill::backend {

class WorkspacePlanner final : public Backend {
 public:
  // Plans for `planned`, which must outlive the planner.
  explicit WorkspacePlanner(const Backend& planned) : planned_(planned) {}

  bool plans_only() const override { return true; }
  std::string name() const override { return planned_.name(); }
  std::string device_description() const override { return planned_.device_description(); }
  Device device() const override { return planned_.device(); }
  KernelShapeLimits shape_limits() const override { return planned_.shape_limits(); }
  DType act_dtype() const override { return planned_.act_dtype(); }
  std::optional<DType> matrix_dtype() const override { return planned_.matrix_dtype(); }
  bool kda_snapshots_in_step() const override { return planned_.kda_snapshots_in_step(); }
  bool kda_fuses_decode(const KdaDecodeArgs& a) const override { return planned_.kda_fuses_decode(a); }
  size_t kda_attention_scratch_bytes(const KdaAttentionArgs& a) const override;
  size_t mla_attention_scratch_bytes(const MlaAttentionArgs& a) const override;
  size_t moe_experts_scratch_bytes(const MoeExpertsArgs& a) const override;
  size_t gemm_scratch_bytes(const GemmArgs& a) const override;
  size_t sample_scratch_bytes(const SampleArgs& a) const override;
  bool moe_fuses_shared_expert(const MoeExpertsArgs& a) const override;

  Result<DeviceAllocation> allocate(size_t bytes) override;
  Status copy_to_device(void*, const void*, size_t) override { return {}; }
  Status copy_to_host(void*, const void*, size_t) override { return {}; }
  Status copy_device_to_device(void*, const void*, size_t) override { return {}; }
  Status fill_zero(TensorView) override { return {}; }
  Status fill_random(TensorView, uint64_t, float, float) override { return {}; }
  Status upload_layout(const BatchLayoutHost& host, int block_size, BatchLayout* out) override;
  Status upload_async(void*, const void*, size_t) override { return {}; }
  Status synchronize() override { return {}; }

 private:
  // Never reached: every op returns before its body on a planner (plans_only).
  Status embed_impl(const EmbedArgs&) override;
  Status rms_norm_impl(const RmsNormArgs&) override;
  Status add_rms_norm_impl(const AddRmsNormArgs&) override;
  Status gemm_impl(const GemmArgs&) override;
  Status glu_impl(const GluArgs&) override;
  Status add_impl(const AddArgs&) override;
  Status sigmoid_gate_impl(const SigmoidGateArgs&) override;
  Status kda_prepare_impl(const KdaPrepareArgs&) override;
  Status kda_attention_impl(const KdaAttentionArgs&) override;
  Status kda_output_impl(const KdaOutputArgs&) override;
  Status mla_cache_write_impl(const MlaCacheWriteArgs&) override;
  Status mla_attention_impl(const MlaAttentionArgs&) override;
  Status moe_route_impl(const MoeRouteArgs&) override;
  Status moe_experts_impl(const MoeExpertsArgs&) override;
  Status gather_rows_impl(const GatherRowsArgs&) override;
  Status attn_res_mix_impl(const AttnResMixArgs&) override;
  Status sample_impl(const SampleArgs&) override;
  Status apply_penalties_impl(const PenaltyArgs&) override;
  Status mask_logits_impl(const TokenMaskArgs&) override;
  Status nonfinite_rows_impl(const NonfiniteRowsArgs&) override;
  Status logprobs_impl(const LogprobsArgs&) override;
  Status quantize_fp8_impl(const QuantizeFp8Args&) override;

  const Backend& planned_;
};

}  // namespace rill::backend
