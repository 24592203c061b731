// Tests of balanced (round-robin) gating (router/balanced_gating.hpp, balanced_gating_ref.hpp):
// route_omp against route_ref over the sweep, the hand-worked assignment, floor/ceil loads and an
// imbalance of exactly 1 whenever E divides N*k.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "router/route.hpp"
#include "tests/support/router_support.hpp"

namespace moesim {
namespace {

using test::make_request;

RouterConfig balanced() {
  RouterConfig cfg;
  cfg.gating = Gating::balanced;
  return cfg;
}

TEST(BalancedGating, OmpMatchesReferenceOnSweep) {
  RouterConfig c = balanced();
  c.routed_scaling_factor = 2.0;
  test::sweep_omp_against_ref({balanced(), c}, 707);
}

TEST(BalancedGating, HandWorkedRoundRobin) {
  // N 3, E 4, k 2: assignments 0..5 go to experts 0 1 2 3 0 1.
  for (auto fn : {&route_omp, &route_ref}) {
    const Routing r = fn(balanced(), make_request({}, 3, 4, 2), nullptr);
    EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 1, 2, 3, 0, 1}));
    EXPECT_EQ(r.token, (std::vector<int32_t>{0, 0, 1, 1, 2, 2}));
    for (float w : r.weight) EXPECT_FLOAT_EQ(w, 0.5f);
  }
}

TEST(BalancedGating, ImbalanceIsExactlyOneWhenExpertsDivideAssignments) {
  for (int64_t n : {1, 7, 64, 333}) {
    for (int num_e : {1, 3, 8, 60}) {
      for (int k : {1, 2, 3}) {
        if (k > num_e) continue;
        const Routing r = route_omp(balanced(), make_request({}, n, num_e, k), nullptr);
        const std::vector<int64_t> load = test::expert_loads(r);
        const int64_t m = n * k;
        for (int64_t l : load) {
          EXPECT_TRUE(l == m / num_e || l == (m + num_e - 1) / num_e) << "N " << n << " E " << num_e << " k " << k;
        }
        if (m % num_e == 0) {
          EXPECT_EQ(test::imbalance(load), 1.0) << "N " << n << " E " << num_e << " k " << k;
        }
      }
    }
  }
}

}  // namespace
}  // namespace moesim
