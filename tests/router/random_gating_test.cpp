// Tests of random gating (router/random_gating.hpp, random_gating_ref.hpp): route_omp against route_ref
// over the sweep, distinct experts per token, uniform expert and slot frequencies, seed contract, and
// max/mean load matching an independent balls-into-bins simulation.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "router/route.hpp"
#include "tests/support/router_support.hpp"

namespace moesim {
namespace {

using test::make_request;

RouterConfig random_gate() {
  RouterConfig cfg;
  cfg.gating = Gating::random;
  return cfg;
}

TEST(RandomGating, OmpMatchesReferenceOnSweep) {
  RouterConfig c = random_gate();
  c.routed_scaling_factor = 0.5;
  test::sweep_omp_against_ref({random_gate(), c}, 606);
}

TEST(RandomGating, TopKEqualsExpertsIsAPermutation) {
  const Routing r = route_omp(random_gate(), make_request({}, 50, 7, 7, 3), nullptr);
  for (int t = 0; t < 50; ++t) {
    std::vector<int32_t> row(r.expert.begin() + t * 7, r.expert.begin() + (t + 1) * 7);
    std::sort(row.begin(), row.end());
    EXPECT_EQ(row, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6})) << "token " << t;
    for (int j = 0; j < 7; ++j) EXPECT_FLOAT_EQ(r.weight[t * 7 + j], 1.0f / 7.0f);
  }
}

TEST(RandomGating, ExpertsAndSlotsAreUniform) {
  // 20000 tokens x 3 slots over 10 experts: every (slot, expert) cell expects 2000, std ~ 42.
  const int64_t n = 20000;
  const uint64_t seed = 8;
  const Routing r = route_omp(random_gate(), make_request({}, n, 10, 3, seed), nullptr);
  std::vector<int64_t> cell(3 * 10, 0);
  for (int64_t i = 0; i < r.num_assignments(); ++i) ++cell[(i % 3) * 10 + r.expert[i]];
  for (int64_t c : cell) {
    EXPECT_GT(c, 1800) << "seed " << seed;
    EXPECT_LT(c, 2200) << "seed " << seed;
  }
}

TEST(RandomGating, SameSeedSameRoutingOtherSeedDiffers) {
  const Routing a = route_omp(random_gate(), make_request({}, 100, 8, 2, 5), nullptr);
  const Routing b = route_ref(random_gate(), make_request({}, 100, 8, 2, 5), nullptr);
  const Routing c = route_omp(random_gate(), make_request({}, 100, 8, 2, 6), nullptr);
  EXPECT_EQ(a.expert, b.expert);
  EXPECT_NE(a.expert, c.expert);
}

// Mean over trials of max/mean load when every token throws top_k distinct balls into num_e bins,
// drawn with std::mt19937_64 (independent of the counter RNG).
double simulated_imbalance(int64_t n, int num_e, int k, int trials, uint64_t seed) {
  std::mt19937_64 gen(seed);
  double sum = 0.0;
  std::vector<int32_t> bins(num_e);
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<int64_t> load(num_e, 0);
    for (int64_t t = 0; t < n; ++t) {
      std::iota(bins.begin(), bins.end(), 0);
      for (int j = 0; j < k; ++j) {
        std::uniform_int_distribution<int> pick(j, num_e - 1);
        std::swap(bins[j], bins[pick(gen)]);
        ++load[bins[j]];
      }
    }
    sum += test::imbalance(load);
  }
  return sum / trials;
}

TEST(RandomGating, MaxOverMeanLoadMatchesBallsIntoBins) {
  const int64_t n = 1000;
  const int num_e = 16, k = 2, trials = 60;
  double routed = 0.0;
  for (int trial = 0; trial < trials; ++trial) {
    const Routing r = route_omp(random_gate(), make_request({}, n, num_e, k, 1000 + trial), nullptr);
    routed += test::imbalance(test::expert_loads(r));
  }
  routed /= trials;
  const double simulated = simulated_imbalance(n, num_e, k, trials, 77);
  // Each trial's max/mean has std ~ 0.04 here, so a mean over 60 trials has std ~ 0.005;
  // 0.03 is about four standard deviations of the difference.
  EXPECT_NEAR(routed, simulated, 0.03) << "seeds 1000.." << 1000 + trials - 1 << " vs mt19937_64(77)";
  EXPECT_GT(routed, 1.05);  // random routing is not balanced
}

}  // namespace
}  // namespace moesim
