// moesim::median (src/common/median.hpp) against values worked by hand.
#include "src/common/median.hpp"

#include <gtest/gtest.h>

namespace moesim {
namespace {

TEST(Median, OddEvenAndEmpty) {
  EXPECT_EQ(median({}), 0.0);
  EXPECT_EQ(median({7.0}), 7.0);
  EXPECT_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);  // (2 + 3) / 2, whatever the input order
  EXPECT_EQ(median({-1.0, -1.0, 5.0, 100.0, -1.0}), -1.0);
}

}  // namespace
}  // namespace moesim
