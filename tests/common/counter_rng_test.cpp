// Tests of the counter-based RNG (common/counter_rng.hpp): pure function of (seed, stream, index),
// distinct draws for distinct indices, and the moments of the uniform and Irwin-Hall normal draws.
// Seeds are fixed; tolerances are several standard errors of the sample moments.
#include <cmath>
#include <cstdint>
#include <set>

#include <gtest/gtest.h>

#include "src/common/counter_rng.hpp"

namespace moesim {
namespace {

TEST(CounterRng, PureFunctionOfSeedStreamIndex) {
  EXPECT_EQ(counter_hash(1, 2, 3), counter_hash(1, 2, 3));
  EXPECT_NE(counter_hash(1, 2, 3), counter_hash(2, 2, 3));
  EXPECT_NE(counter_hash(1, 2, 3), counter_hash(1, 3, 3));
  EXPECT_NE(counter_hash(1, 2, 3), counter_hash(1, 2, 4));
  EXPECT_EQ(splitmix64(0), 0xE220A8397B1DCDAFull);  // the published first output of splitmix64 seeded 0
}

TEST(CounterRng, DistinctIndicesNeverCollide) {
  std::set<uint64_t> seen;
  for (uint64_t i = 0; i < 100000; ++i) seen.insert(counter_hash(42, kStreamRandomDrop, i));
  EXPECT_EQ(seen.size(), 100000u);
}

TEST(CounterRng, UniformMoments) {
  const int n = 200000;
  double sum = 0.0, sum2 = 0.0;
  for (int i = 0; i < n; ++i) {
    const double u = counter_uniform(7, 1, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sum2 += u * u;
  }
  // mean 1/2 and variance 1/12; standard errors ~ 6.5e-4 and 2e-4.
  EXPECT_NEAR(sum / n, 0.5, 4e-3);
  EXPECT_NEAR(sum2 / n - (sum / n) * (sum / n), 1.0 / 12.0, 2e-3);
}

TEST(CounterRng, BelowCoversTheRangeUniformly) {
  int count[7] = {0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 70000; ++i) {
    const uint32_t r = counter_below(3, 2, i, 7);
    ASSERT_LT(r, 7u);
    ++count[r];
  }
  for (int c : count) EXPECT_NEAR(c, 10000, 500);  // std ~ 93
  for (int i = 0; i < 100; ++i) EXPECT_EQ(counter_below(3, 2, i, 1), 0u);
}

TEST(CounterRng, NormalMomentsAndSupport) {
  const int n = 200000;
  double sum = 0.0, sum2 = 0.0, sum4 = 0.0;
  for (int i = 0; i < n; ++i) {
    const double z = counter_normal(11, kStreamNoise, i);
    ASSERT_LE(std::fabs(z), 6.0);
    sum += z;
    sum2 += z * z;
    sum4 += z * z * z * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);       // standard error 0.0022
  EXPECT_NEAR(sum2 / n, 1.0, 0.02);      // standard error ~ 0.003
  EXPECT_NEAR(sum4 / n, 2.9, 0.1);       // Irwin-Hall(12) kurtosis is 3 - 1/10
  // Exactly a multiple of 2^-24: the property that makes host and device agree bit for bit.
  const double z = counter_normal(5, kStreamNoise, 9);
  EXPECT_EQ(std::ldexp(z, 24), std::floor(std::ldexp(z, 24)));
}

}  // namespace
}  // namespace moesim
