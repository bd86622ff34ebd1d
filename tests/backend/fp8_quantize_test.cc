// Backend::quantize_fp8 on the GPU (`--quantization fp8` at load, src/backend/cuda/gemm/fp8_quantize.cu)
// against the CPU reference, bit for bit: the same E4M3 codes and F32 scales from the same bf16, f16 or f32
// matrix, for 128 x 128 blocks, per-channel scales and 64 x 128 blocks, on Kimi-Linear-48B's shapes and odd
// ones that end in partial blocks, with an all-zero block and values over many binades; per-channel scales of
// more rows than a grid dimension holds.
#include <cstring>
#include <vector>

#include "backend/op_harness.h"

namespace rill::testing {
namespace {

std::vector<uint8_t> raw(backend::Backend& be, const TensorView& t) {
  std::vector<uint8_t> out(size_t(t.numel()) * dtype_size(t.dtype));
  EXPECT_TRUE(be.copy_to_host(out.data(), t.data, out.size()).ok());
  return out;
}

void run_case(OpHarness& h, int64_t rows, int64_t cols, backend::Fp8Blocks b, DType from) {
  SCOPED_TRACE(::testing::Message() << rows << " x " << cols << " blocks " << b.rows << " x " << b.cols << " from "
                                    << dtype_name(from));
  std::vector<float> v = h.randn(rows * cols, 1.0f, from != DType::F32);
  for (int64_t i = 0; i < rows * cols; ++i) v[size_t(i)] *= std::ldexp(1.0f, int(i % 13) - 6);
  for (int64_t c = 0; c < std::min<int64_t>(cols, 128); ++c) v[size_t(c)] = 0.0f;  // row 0 starts with zeros
  if (from != DType::F32)
    for (float& x : v) x = round_to_bf16(x);  // exact in bf16 and in f16 (these magnitudes)
  std::vector<uint8_t> codes[2], scales[2];
  for (int side = 0; side < 2; ++side) {
    backend::Backend& be = side == 0 ? h.cpu() : h.dev();
    BackendTensor src = h.put(be, v, from, {rows, cols});
    BackendTensor q = h.empty(be, DType::U8, {rows, cols});  // the op takes U8 codes too
    BackendTensor s = h.empty(be, DType::F32, {b.scale_rows(rows), b.scale_cols(cols)});
    const Status st = be.quantize_fp8({src.view, q.view, s.view, b});
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(be.synchronize().ok());
    codes[side] = raw(be, q.view);
    scales[side] = raw(be, s.view);
  }
  EXPECT_EQ(scales[1], scales[0]);
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < codes[0].size(); ++i)
    if (codes[0][i] != codes[1][i] && differ++ == 0) first = i;
  EXPECT_EQ(differ, 0u) << "first at " << first << ": cpu " << int(codes[0][first]) << ", gpu " << int(codes[1][first]);
}

class Fp8QuantizeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8QuantizeTest, EqualsTheCpuBitForBit) {
  OpHarness h(GetParam());
  RILL_REQUIRE_BACKEND(h);
  const backend::Fp8Blocks blocks[] = {{128, 128}, {1, backend::Fp8Blocks::kWholeRow}, {64, 128}};
  for (const auto& b : blocks)
    for (DType from : {DType::BF16, DType::F16, DType::F32}) {
      run_case(h, 200, 136, b, from);
      run_case(h, 7, 300, b, from);
      run_case(h, 1024, 2304, b, from);  // a 48B expert's gate or up part
    }
  run_case(h, 12288, 2304, {128, 128}, DType::BF16);  // the 48B's KDA q|k|v
  // ptpc_fp8: a block row per matrix row, more than a grid's 65535 (the kernel walks them).
  run_case(h, 70000, 24, {1, backend::Fp8Blocks::kWholeRow}, DType::BF16);
}

INSTANTIATE_TEST_SUITE_P(Backends, Fp8QuantizeTest, ::testing::ValuesIn(tested_backends()));

}  // namespace
}  // namespace rill::testing
