// Tests of Sinkhorn gating (router/sinkhorn.hpp, sinkhorn_ref.hpp): route_omp against route_ref over
// the sweep, the template against the reference (rounds run, stopping rule), a hand-worked 2x2 case
// whose balanced matrix is known in closed form, and the balancing effect on skewed logits.
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>
#include <thrust/system/omp/execution_policy.h>

#include "router/route.hpp"
#include "router/sinkhorn.hpp"
#include "router/sinkhorn_ref.hpp"
#include "tests/support/router_support.hpp"

namespace moesim {
namespace {

using test::make_request;

using test::kBoth;
using test::kNames;
using test::RouteFn;
constexpr double kHandTolerance = 1e-6;  // hand values in double; the router rounds each weight to float once

RouterConfig sinkhorn() {
  RouterConfig cfg;
  cfg.gating = Gating::sinkhorn;
  return cfg;
}

TEST(Sinkhorn, OmpMatchesReferenceOnSweep) {
  std::vector<RouterConfig> bases;
  RouterConfig c = sinkhorn();
  bases.push_back(c);
  c.sinkhorn_iterations = 3;  // stops on the round limit, not on the tolerance
  c.renormalize = true;
  bases.push_back(c);
  test::sweep_omp_against_ref(bases, 404);
}

// Runs the template directly and the reference; returns the rounds of each.
void run_both(const std::vector<float>& logits, int64_t n, int num_e, int k, int iterations, double tolerance,
              int* rounds_omp, int* rounds_ref) {
  std::vector<double> cost(n * num_e), d0(n), d1(num_e), d1_old(num_e), key(n * k);
  std::vector<int32_t> expert(n * k);
  std::vector<float> weight(n * k);
  *rounds_omp = sinkhorn_gating(thrust::omp::par, logits.data(), n, num_e, k, iterations, tolerance, GateWeightRule{},
                                expert.data(), weight.data(),
                                SinkhornScratch{cost.data(), d0.data(), d1.data(), d1_old.data(), key.data()});
  std::vector<int32_t> expert_ref;
  std::vector<float> weight_ref;
  *rounds_ref = sinkhorn_gating_ref(logits.data(), n, num_e, k, iterations, tolerance, GateWeightRule{}, expert_ref,
                                    weight_ref);
  EXPECT_EQ(expert, expert_ref);
}

TEST(Sinkhorn, StopsOnToleranceOrRoundLimitLikeTheReference) {
  const std::vector<float> logits = test::skewed_logits(64, 8, 17, 2, 3.0);
  int omp = 0, ref = 0;
  run_both(logits, 64, 8, 2, 500, 1e-4, &omp, &ref);
  EXPECT_EQ(omp, ref);
  EXPECT_GT(omp, 1);
  EXPECT_LT(omp, 500);  // converged before the limit
  run_both(logits, 64, 8, 2, 500, 0.0, &omp, &ref);
  EXPECT_EQ(omp, 500);  // tolerance 0 is never met
  EXPECT_EQ(ref, 500);
  run_both(logits, 64, 8, 2, 1, 1e-4, &omp, &ref);
  EXPECT_EQ(omp, 1);
  EXPECT_EQ(ref, 1);
}

TEST(Sinkhorn, HandWorkedTwoByTwo) {
  // Logits t0 = (2, 0), t1 = (1, 0): token choice sends both to expert 0. The balanced matrix has
  // rows and columns summing to 1/2, so it is [[x, 1/2 - x], [1/2 - x, x]] with cross ratio
  // x^2 / (1/2 - x)^2 = (c00 c11) / (c01 c10) = e, i.e. x = 0.311 > 0.189: t0 -> e0, t1 -> e1.
  const std::vector<float> logits = {2.f, 0.f, 1.f, 0.f};
  for (int b = 0; b < 2; ++b) {
    const Routing tc = kBoth[b](RouterConfig{}, make_request(logits, 2, 2, 1), nullptr);
    EXPECT_EQ(tc.expert, (std::vector<int32_t>{0, 0})) << kNames[b];
    const Routing r = kBoth[b](sinkhorn(), make_request(logits, 2, 2, 1), nullptr);
    EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 1})) << kNames[b];
    // Weights: the softmax of the original logits at the chosen expert.
    EXPECT_NEAR(r.weight[0], 1.0 / (1.0 + std::exp(-2.0)), kHandTolerance) << kNames[b];
    EXPECT_NEAR(r.weight[1], 1.0 / (1.0 + std::exp(1.0)), kHandTolerance) << kNames[b];
  }
}

TEST(Sinkhorn, TiesGoToLowerExpert) {
  const std::vector<float> logits(3 * 5, 0.5f);  // a uniform matrix is already balanced
  for (int b = 0; b < 2; ++b) {
    const Routing r = kBoth[b](sinkhorn(), make_request(logits, 3, 5, 2), nullptr);
    EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 1, 0, 1, 0, 1})) << kNames[b];
  }
}

TEST(Sinkhorn, BalancesSkewedLogitsFarBetterThanTokenChoice) {
  // Three hot experts of 16 with +3 on their logits: token choice piles onto them.
  const uint64_t seed = 23;
  const std::vector<float> logits = test::skewed_logits(512, 16, seed, 3, 3.0);
  const Routing tc = route_omp(RouterConfig{}, make_request(logits, 512, 16, 2), nullptr);
  const Routing sk = route_omp(sinkhorn(), make_request(logits, 512, 16, 2), nullptr);
  const double tc_imbalance = test::imbalance(test::expert_loads(tc));
  const double sk_imbalance = test::imbalance(test::expert_loads(sk));
  EXPECT_GT(tc_imbalance, 3.0) << "seed " << seed;
  EXPECT_LT(sk_imbalance, 1.6) << "seed " << seed;
  EXPECT_LT(sk_imbalance, 0.4 * tc_imbalance) << "seed " << seed;
}

}  // namespace
}  // namespace moesim
