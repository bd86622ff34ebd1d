#include "backend/cuda_backend_options.h"

#include <charconv>

namespace rill::backend {
namespace {

Result<bool> parse_bool(std::string_view key, std::string_view v) {
  if (v == "1" || v == "true" || v == "on") return true;
  if (v == "0" || v == "false" || v == "off") return false;
  return invalid_argument("backend option {}: expected 0/1/true/false/on/off, got \"{}\"", key, v);
}

// A count in [0, 2^30]; `what` names it in the error.
Result<int> parse_count(std::string_view key, std::string_view v, std::string_view what) {
  int n = -1;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < 0 || n > (1 << 30))
    return invalid_argument("backend option {}: expected {} in [0, 2^30], got \"{}\"", key, what, v);
  return n;
}

}  // namespace

const char* mla_prefill_name(MlaPrefillPath p) {
  return p == MlaPrefillPath::Cudnn ? "cudnn" : p == MlaPrefillPath::Rill ? "rill" : "auto";
}

std::string cuda_backend_option_keys() {
  return "pdl, kda_fused_decode, kda_recurrent_verify, kda_intra_tensor_solve, moe_fuse_shared, "
         "decode_fusion, mla_expand_rows, "
         "gemm_autotune, moe_cublas_grouped, moe_cublas_min_pairs, moe_wgmma, moe_wgmma_fp8, "
         "moe_wgmma_mxfp4, "
         "moe_wgmma_mxfp4_min_pairs, moe_route_gemm_min_tokens, fp8_gemm, mla_prefill";
}

Status set_cuda_backend_option(CudaBackendOptions& o, std::string_view key_value) {
  const size_t eq = key_value.find('=');
  if (eq == std::string_view::npos)
    return invalid_argument("backend option \"{}\": expected key=value (keys: {})", key_value,
                            cuda_backend_option_keys());
  const std::string_view key = key_value.substr(0, eq), value = key_value.substr(eq + 1);
  bool* flag = key == "pdl"                      ? &o.pdl
               : key == "kda_fused_decode"       ? &o.kda_fused_decode
               : key == "kda_recurrent_verify"   ? &o.kda_recurrent_verify
               : key == "kda_intra_tensor_solve" ? &o.kda_intra_tensor_solve
               : key == "moe_fuse_shared"        ? &o.moe_fuse_shared
               : key == "decode_fusion"          ? &o.decode_fusion
               : key == "gemm_autotune"          ? &o.gemm_autotune
               : key == "moe_cublas_grouped"     ? &o.moe_cublas_grouped
               : key == "moe_wgmma"              ? &o.moe_wgmma
               : key == "moe_wgmma_fp8"          ? &o.moe_wgmma_fp8
               : key == "moe_wgmma_mxfp4"        ? &o.moe_wgmma_mxfp4
                                                 : nullptr;
  if (flag) {
    RILL_ASSIGN_OR_RETURN(*flag, parse_bool(key, value));
    return {};
  }
  if (key == "fp8_gemm") {
    if (value != "dequant" && value != "native")
      return invalid_argument("backend option fp8_gemm: expected dequant or native, got \"{}\"", value);
    o.fp8_gemm_native = value == "native";
    return {};
  }
  if (key == "mla_prefill") {
    if (value != "auto" && value != "cudnn" && value != "rill")
      return invalid_argument("backend option mla_prefill: expected auto, cudnn or rill, got \"{}\"", value);
    o.mla_prefill = value == "auto"    ? MlaPrefillPath::Auto
                    : value == "cudnn" ? MlaPrefillPath::Cudnn
                                       : MlaPrefillPath::Rill;
    return {};
  }
  int* count = key == "moe_cublas_min_pairs"        ? &o.moe_cublas_min_pairs
               : key == "moe_wgmma_mxfp4_min_pairs" ? &o.moe_wgmma_mxfp4_min_pairs
               : key == "moe_route_gemm_min_tokens" ? &o.moe_route_gemm_min_tokens
               : key == "mla_expand_rows"           ? &o.mla_expand_rows
                                                    : nullptr;
  if (count) {
    RILL_ASSIGN_OR_RETURN(*count, parse_count(key, value,
                                              key == "mla_expand_rows" ? "rows (0: the default)"
                                              : key == "moe_cublas_min_pairs" ||
                                                      key == "moe_wgmma_mxfp4_min_pairs"
                                                  ? "a count of pairs"
                                                                              : "a count of tokens"));
    return {};
  }
  return invalid_argument("unknown backend option \"{}\" (keys: {})", key, cuda_backend_option_keys());
}

Result<CudaBackendOptions> parse_cuda_backend_options(const std::vector<std::string>& key_values) {
  CudaBackendOptions o;
  for (const std::string& kv : key_values) RILL_TRY(set_cuda_backend_option(o, kv));
  return o;
}

}  // namespace rill::backend
