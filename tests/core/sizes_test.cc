// core/sizes: overflow-checked products and sums against hand-computed limits, and byte formatting.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "core/sizes.h"

namespace rill {
namespace {

TEST(Sizes, ProductsReportOverflowInsteadOfWrapping) {
  EXPECT_EQ(checked_product({163840, 7168, 2}), int64_t(163840) * 7168 * 2);
  EXPECT_EQ(checked_product({}), 1);
  EXPECT_EQ(checked_product({int64_t(1) << 31, int64_t(1) << 31}), int64_t(1) << 62);
  EXPECT_EQ(checked_product({int64_t(1) << 32, int64_t(1) << 31}), std::nullopt);  // 2^63 > INT64_MAX
  EXPECT_EQ(checked_product({int64_t(1) << 40, 0, int64_t(1) << 40}), 0);
  EXPECT_EQ(checked_product({3, -1}), std::nullopt);
  EXPECT_EQ(checked_sum(std::numeric_limits<int64_t>::max() - 1, 1), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(checked_sum(std::numeric_limits<int64_t>::max(), 1), std::nullopt);
  EXPECT_EQ(checked_sum(-1, 1), std::nullopt);
}

TEST(Sizes, BytesPrintInBinaryUnits) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(8192), "8.0 KiB");
  EXPECT_EQ(format_bytes(22.1 * (int64_t(1) << 30)), "22.1 GiB");
  EXPECT_EQ(format_bytes(3.2 * (int64_t(1) << 40)), "3.2 TiB");
}

}  // namespace
}  // namespace rill
