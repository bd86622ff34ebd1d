#include "backend/workspace_planner.h"

namespace rill::backend {
namespace {

Status not_on_a_planner() {
  return internal_error("an op ran on a WorkspacePlanner (it only plans: Backend::plans_only)");
}

}  // namespace

size_t WorkspacePlanner::kda_attention_scratch_bytes(const KdaAttentionArgs& a) const {
  return planned_.kda_attention_scratch_bytes(a);
}
size_t WorkspacePlanner::mla_attention_scratch_bytes(const MlaAttentionArgs& a) const {
  return planned_.mla_attention_scratch_bytes(a);
}
size_t WorkspacePlanner::moe_experts_scratch_bytes(const MoeExpertsArgs& a) const {
  return planned_.moe_experts_scratch_bytes(a);
}
size_t WorkspacePlanner::gemm_scratch_bytes(const GemmArgs& a) const {
  return planned_.gemm_scratch_bytes(a);
}
size_t WorkspacePlanner::sample_scratch_bytes(const SampleArgs& a) const {
  return planned_.sample_scratch_bytes(a);
}
bool WorkspacePlanner::moe_fuses_shared_expert(const MoeExpertsArgs& a) const {
  return planned_.moe_fuses_shared_expert(a);
}

Result<DeviceAllocation> WorkspacePlanner::allocate(size_t bytes) {
  return internal_error("allocating {} bytes on a WorkspacePlanner (planning allocates nothing)", bytes);
}

Status WorkspacePlanner::upload_layout(const BatchLayoutHost& host, int block_size, BatchLayout* out) {
  *out = layout_scalars(host, block_size);
  return {};
}

Status WorkspacePlanner::embed_impl(const EmbedArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::rms_norm_impl(const RmsNormArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::add_rms_norm_impl(const AddRmsNormArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::gemm_impl(const GemmArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::glu_impl(const GluArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::add_impl(const AddArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::sigmoid_gate_impl(const SigmoidGateArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::kda_prepare_impl(const KdaPrepareArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::kda_attention_impl(const KdaAttentionArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::kda_output_impl(const KdaOutputArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::mla_cache_write_impl(const MlaCacheWriteArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::mla_attention_impl(const MlaAttentionArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::moe_route_impl(const MoeRouteArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::moe_experts_impl(const MoeExpertsArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::gather_rows_impl(const GatherRowsArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::attn_res_mix_impl(const AttnResMixArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::sample_impl(const SampleArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::apply_penalties_impl(const PenaltyArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::mask_logits_impl(const TokenMaskArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::nonfinite_rows_impl(const NonfiniteRowsArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::logprobs_impl(const LogprobsArgs&) {
  return not_on_a_planner();
}
Status WorkspacePlanner::quantize_fp8_impl(const QuantizeFp8Args&) {
  return not_on_a_planner();
}

}  // namespace rill::backend
