// IdPool: all-or-nothing allocation, lowest ids first, every id returned exactly once.
#include <gtest/gtest.h>

#include "cache/id_pool.h"

namespace rill::cache {
namespace {

TEST(IdPool, AllOrNothingAndExactlyOnce) {
  IdPool p("blocks", 5);
  auto a = p.allocate(3);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, (std::vector<int32_t>{0, 1, 2}));
  auto b = p.allocate(3);
  EXPECT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::ResourceExhausted);
  EXPECT_EQ(p.free_count(), 2);  // nothing taken by the failed request
  ASSERT_TRUE(p.release(std::vector<int32_t>{1}).ok());
  EXPECT_FALSE(p.release(std::vector<int32_t>{1}).ok());       // double free
  EXPECT_FALSE(p.release(std::vector<int32_t>{4}).ok());       // never allocated
  EXPECT_FALSE(p.release(std::vector<int32_t>{0, 0}).ok());    // twice in one call
  EXPECT_EQ(p.used_count(), 2);
  ASSERT_TRUE(p.release(std::vector<int32_t>{0, 2}).ok());
  EXPECT_EQ(p.used_count(), 0);
  EXPECT_EQ(*p.allocate(1), std::vector<int32_t>{0});
}

}  // namespace
}  // namespace rill::cache
