// Tests of the synthetic workload: reproducible per seed, popularity bias with the Zipf exponent
// `skew`, and moments of the noise close to N(0, 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "src/workload/synthetic_logits.hpp"

namespace moesim {
namespace {

TEST(SyntheticLogits, SameSeedSameLogits) {
  EXPECT_EQ(synthetic_logits(100, 7, 1.0, 3), synthetic_logits(100, 7, 1.0, 3));
  EXPECT_NE(synthetic_logits(100, 7, 1.0, 3), synthetic_logits(100, 7, 1.0, 4));
  EXPECT_TRUE(synthetic_logits(0, 7, 1.0, 3).empty());
}

TEST(SyntheticLogits, BiasIsZipfOverAShuffledRanking) {
  const int E = 16;
  const double skew = 1.5;
  std::vector<float> bias = expert_popularity_bias(E, skew, 11);
  std::sort(bias.begin(), bias.end(), std::greater<float>());
  // Sorted biases are -skew * ln(rank + 1) for rank 0..E-1.
  for (int r = 0; r < E; ++r) EXPECT_NEAR(bias[r], -skew * std::log(r + 1.0), 1e-6) << "rank " << r;
  for (float b : expert_popularity_bias(E, 0.0, 11)) EXPECT_EQ(b, 0.0f);
}

TEST(SyntheticLogits, NoiseIsStandardNormal) {
  const int64_t N = 20000;
  const std::vector<float> x = synthetic_hidden(N, 1, 5);
  double mean = 0, sq = 0;
  for (float v : x) mean += v;
  mean /= N;
  for (float v : x) sq += (v - mean) * (v - mean);
  // Standard errors at N = 20000: mean 0.007, variance 0.01; allow about 4 sigma.
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(sq / N, 1.0, 0.04);
}

TEST(SyntheticLogits, TokenIdsInVocabulary) {
  const auto ids = synthetic_token_ids(1000, 50, 1);
  for (int64_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 50);
  }
}

}  // namespace
}  // namespace moesim
