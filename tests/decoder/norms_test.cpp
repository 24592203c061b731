// Tests of RMSNorm against its serial reference, including one token, hidden 1 and in-place use.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include <thrust/system/omp/execution_policy.h>

#include "src/decoder/norms.hpp"
#include "src/decoder/norms_ref.hpp"
#include "tests/support/kernel_support.hpp"

namespace moesim {
namespace {

TEST(RmsNorm, MatchesReference) {
  for (auto [n, h] : std::vector<std::pair<int64_t, int64_t>>{{0, 4}, {1, 1}, {1, 7}, {13, 64}}) {
    const uint64_t seed = 1000 + n * 100 + h;
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> d(0.0f, 3.0f);
    std::vector<float> x(n * h), w(h), out(n * h), ref(n * h);
    for (float& v : x) v = d(rng);
    for (float& v : w) v = d(rng);
    rms_norm(thrust::omp::par, x.data(), w.data(), n, h, out.data());
    rms_norm_ref(x.data(), w.data(), n, h, ref.data());
    // Same double formula; the product order x * inv * w is the same on both sides.
    EXPECT_TRUE(test::all_near(out, ref, 1e-6, 1e-6)) << "seed " << seed;
    std::vector<float> inplace = x;
    rms_norm(thrust::omp::par, inplace.data(), w.data(), n, h, inplace.data());
    EXPECT_TRUE(test::same_bytes(inplace, out)) << "seed " << seed;
  }
}

TEST(RmsNorm, UnitWeightGivesUnitRms) {
  std::vector<float> x = {3, -4, 0, 12}, w(4, 1.0f), out(4);
  rms_norm(thrust::omp::par, x.data(), w.data(), 1, 4, out.data(), 0.0);
  double sq = 0;
  for (float v : out) sq += double(v) * v;
  EXPECT_NEAR(sq / 4, 1.0, 1e-6);
}

}  // namespace
}  // namespace moesim
