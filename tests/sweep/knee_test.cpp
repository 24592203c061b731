// Tests src/sweep/knee: the elasticity by hand, the knee of a roofline curve worked out by hand, a
// curve that never bends, and bad inputs. Host only.
#include "src/sweep/knee.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "src/common/error.hpp"

namespace moesim {
namespace {

TEST(Knee, ElasticityByHand) {
  EXPECT_DOUBLE_EQ(batching_elasticity(1, 5.0, 2, 5.0), 1.0);   // flat: batch 2 costs what batch 1 costs
  EXPECT_DOUBLE_EQ(batching_elasticity(1, 5.0, 2, 10.0), 0.0);  // linear: no benefit
  // sqrt growth is the rule's border: elasticity 1/2.
  EXPECT_NEAR(batching_elasticity(4, 2.0, 16, 4.0), 0.5, 1e-15);
}

TEST(Knee, RooflineCurveBendsAtTheRidge) {
  // t(n) = max(100, n): flat until 100, linear past it. Batches 25, 50, ..., 800.
  const std::vector<int64_t> n = {25, 50, 100, 200, 400, 800};
  std::vector<double> t;
  for (int64_t x : n) t.push_back(std::max(100.0, static_cast<double>(x)));
  // 25 -> 50 and 50 -> 100 are flat (elasticity 1); 100 -> 200 doubles (elasticity 0): the knee is 100.
  EXPECT_EQ(knee_tokens(n, t), 100);
  // A smooth max: t(n) = 100 + n. 100 -> 200: ln((200/100) / (300/200)) / ln 2 = 0.415 < 0.5; 50 -> 100:
  // ln((150/50) / (200/100)) / ln 2 = 0.585. So the knee is 100.
  std::vector<double> smooth;
  for (int64_t x : n) smooth.push_back(100.0 + static_cast<double>(x));
  EXPECT_EQ(knee_tokens(n, smooth), 100);
}

TEST(Knee, NoBendWithinTheSweep) {
  EXPECT_EQ(knee_tokens({1, 2, 4}, {7.0, 7.0, 7.1}), std::nullopt);
  EXPECT_EQ(knee_tokens({8}, {1.0}), std::nullopt);
}

TEST(Knee, BadInputsThrow) {
  EXPECT_THROW(batching_elasticity(2, 1.0, 2, 1.0), Error);
  EXPECT_THROW(batching_elasticity(1, 0.0, 2, 1.0), Error);
  EXPECT_THROW(knee_tokens({1, 2}, {1.0}), Error);
}

}  // namespace
}  // namespace moesim
