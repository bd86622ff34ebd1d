// Device names: "cuda" and "cuda:N" parse to device indices; every other spelling is an error naming it.
#include <gtest/gtest.h>

#include "backend/backend.h"

namespace rill::backend {
namespace {

TEST(DeviceName, CudaIndices) {
  EXPECT_EQ(parse_cuda_device("cuda").value(), 0);
  EXPECT_EQ(parse_cuda_device("cuda:0").value(), 0);
  EXPECT_EQ(parse_cuda_device("cuda:13").value(), 13);
  for (const char* bad : {"cuda:", "cuda:-1", "cuda:1x", "cuda1", "CUDA", "cuda:99999999999", "gpu:0", ""}) {
    const auto r = parse_cuda_device(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("expected cpu, cuda or cuda:N"), std::string::npos) << r.status().message();
  }
  EXPECT_FALSE(make_backend("cuda:x").ok());
  EXPECT_TRUE(make_backend("cpu").ok());
}

}  // namespace
}  // namespace rill::backend
