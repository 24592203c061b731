// Tests src/workload/load_distribution: aiconfigurator's power law (its cap and fix-up worked by hand on
// 4 experts, the sum and the cap on random awkward sizes, the heaviest EP group on rank 0, determinism) and
// the balanced round-robin. Host only.
#include "src/workload/load_distribution.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "src/common/error.hpp"

namespace moesim {
namespace {

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

TEST(LoadDistribution, PowerLawCapAndFixUpOnFourExperts) {
  // T = 2 tokens, k = 3 of E = 4: T k = 6 > E, so the weights come from [1, max(1, 0.8 T)] = [1, 1.6].
  // Whatever the draw, no expert may take more than T = 2 rows and the four must sum to 6: the cap leaves
  // at most 2 each, so at least 3 experts are full, and the loads are a permutation of {2, 2, 2, 0} or
  // {2, 2, 1, 1}.
  for (uint64_t draw = 0; draw < 50; ++draw) {
    std::vector<int64_t> l = power_law_loads(2, 4, 3, 1.2, 1, 7, draw);
    ASSERT_EQ(l.size(), 4u);
    EXPECT_EQ(sum(l), 6) << draw;
    for (int64_t x : l) EXPECT_LE(x, 2) << draw;
    std::sort(l.begin(), l.end());
    EXPECT_TRUE(l == (std::vector<int64_t>{0, 2, 2, 2}) || l == (std::vector<int64_t>{1, 1, 2, 2})) << draw;
  }
  // T = 1, k = 4 of 4: every expert exactly 1 (the cap is 1 and the sum 4).
  EXPECT_EQ(power_law_loads(1, 4, 4, 1.2, 1, 7, 0), (std::vector<int64_t>{1, 1, 1, 1}));
}

TEST(LoadDistribution, PowerLawSumCapAndDeterminismOnAwkwardSizes) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const int E = 1 + static_cast<int>(rng() % 257);
    const int k = 1 + static_cast<int>(rng() % std::min(E, 10));
    const int64_t T = 1 + static_cast<int64_t>(rng() % 5000);
    const double alpha = rng() % 2 ? 1.2 : 1.01;
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " E " << E << " k " << k << " T " << T);
    const std::vector<int64_t> l = power_law_loads(T, E, k, alpha, 1, seed, trial);
    EXPECT_EQ(sum(l), T * k);
    for (int64_t x : l) {
      EXPECT_GE(x, 0);
      EXPECT_LE(x, T);
    }
    EXPECT_EQ(l, power_law_loads(T, E, k, alpha, 1, seed, trial));
  }
}

TEST(LoadDistribution, PowerLawPutsTheHeaviestGroupOnRankZero) {
  for (uint64_t draw = 0; draw < 20; ++draw) {
    const std::vector<int64_t> flat = power_law_loads(512, 64, 8, 1.2, 1, 3, draw);
    const std::vector<int64_t> ep = power_law_loads(512, 64, 8, 1.2, 8, 3, draw);
    EXPECT_EQ(sum(ep), sum(flat));
    const auto group = [&](int g) { return std::accumulate(ep.begin() + 8 * g, ep.begin() + 8 * (g + 1), int64_t{0}); };
    for (int g = 1; g < 8; ++g) EXPECT_GE(group(0), group(g)) << draw;
  }
}

TEST(LoadDistribution, PowerLawIsSkewedAndBalancedIsNot) {
  // alpha 1.2 on 128 experts, 4096 tokens x 8: the hottest expert well above the mean of 256.
  const std::vector<int64_t> l = power_law_loads(4096, 128, 8, 1.2, 1, 11, 0);
  EXPECT_GT(*std::max_element(l.begin(), l.end()), 2 * 256);
  const std::vector<int64_t> b = balanced_round_robin_loads(4096, 128, 8);
  EXPECT_EQ(sum(b), 4096 * 8);
  for (int64_t x : b) EXPECT_EQ(x, 256);
}

TEST(LoadDistribution, BalancedRoundRobinByHand) {
  // E 8, k 2, 3 tokens: stride 4; token 0 takes 0 and 4, token 1 takes 1 and 5, token 2 takes 2 and 6.
  EXPECT_EQ(balanced_round_robin_loads(3, 8, 2), (std::vector<int64_t>{1, 1, 1, 0, 1, 1, 1, 0}));
  // E 5, k 2: stride 3; tokens 0..4 take {0,3}, {1,4}, {2,0}, {3,1}, {4,2}: 2 each.
  EXPECT_EQ(balanced_round_robin_loads(5, 5, 2), (std::vector<int64_t>{2, 2, 2, 2, 2}));
  EXPECT_EQ(balanced_round_robin_loads(0, 5, 2), (std::vector<int64_t>{0, 0, 0, 0, 0}));
}

TEST(LoadDistribution, BadArgumentsThrow) {
  EXPECT_THROW(power_law_loads(0, 4, 2, 1.2, 1, 0, 0), PreconditionError);
  EXPECT_THROW(power_law_loads(4, 4, 5, 1.2, 1, 0, 0), PreconditionError);
  EXPECT_THROW(power_law_loads(4, 6, 2, 1.2, 4, 0, 0), PreconditionError);
  EXPECT_THROW(power_law_loads(4, 4, 2, 1.0, 1, 0, 0), PreconditionError);
}

}  // namespace
}  // namespace moesim

namespace moesim {
namespace {

// The cap's overflow and the fix-up, row by row as the source describes them: the reference the water
// levels of power_law_loads must reproduce (the sum, the cap and every load), on awkward sizes.
std::vector<int64_t> one_row_at_a_time(std::vector<int64_t> load, int64_t cap, int64_t total) {
  const auto least_below = [&] {
    int best = -1;
    for (int e = 0; e < static_cast<int>(load.size()); ++e)
      if (load[e] < cap && (best < 0 || load[e] < load[best])) best = e;
    return best;
  };
  const auto most = [&] {
    int best = 0;
    for (int e = 1; e < static_cast<int>(load.size()); ++e)
      if (load[e] > load[best]) best = e;
    return best;
  };
  int64_t overflow = 0;
  for (int64_t& l : load) {
    if (l > cap) overflow += l - cap, l = cap;
  }
  for (; overflow > 0; --overflow) {
    const int e = least_below();
    if (e < 0) break;
    ++load[e];
  }
  int64_t have = std::accumulate(load.begin(), load.end(), int64_t{0});
  for (; have < total; ++have) ++load[least_below()];
  for (; have > total; --have) --load[most()];
  return load;
}

TEST(LoadDistribution, WaterLevelsMatchOneRowAtATime) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 300; ++trial) {
    const int E = 1 + static_cast<int>(rng() % 40);
    const int64_t cap = 1 + static_cast<int64_t>(rng() % 30);
    const int k = 1 + static_cast<int>(rng() % E);
    const int64_t total = cap * k;  // T k with T = cap
    std::vector<int64_t> load(E);
    for (int64_t& l : load) l = static_cast<int64_t>(rng() % (3 * cap + 2));  // some above the cap
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " trial " << trial);
    const std::vector<int64_t> expected = one_row_at_a_time(load, cap, total);
    // Through the public function's steps 3 and 4: the same loads from the same rounded weights.
    std::vector<int64_t> got = load;
    int64_t overflow = 0;
    for (int64_t& l : got) {
      if (l > cap) overflow += l - cap, l = cap;
    }
    fill_least_loaded(got, cap, overflow);
    const int64_t have = std::accumulate(got.begin(), got.end(), int64_t{0});
    if (have < total) fill_least_loaded(got, cap, total - have);
    if (have > total) take_most_loaded(got, have - total);
    EXPECT_EQ(got, expected);
  }
}

}  // namespace
}  // namespace moesim
