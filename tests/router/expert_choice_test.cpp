// Tests of expert-choice gating (router/expert_choice.hpp, expert_choice_ref.hpp): route_omp against
// route_ref over the sweep, hand-worked selections (0..E experts per token, ties to the lower token,
// sequence groups with a short last group), the capacity rule and exactly C tokens per expert.
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "router/route.hpp"
#include "tests/support/router_support.hpp"

namespace moesim {
namespace {

using test::make_request;
using test::random_logits;

using test::kBoth;
using test::kNames;
using test::RouteFn;
constexpr double kHandTolerance = 1e-6;  // hand values in double; the router rounds each weight to float once

RouterConfig expert_choice() {
  RouterConfig cfg;
  cfg.gating = Gating::expert_choice;
  return cfg;
}

double p0(double z0, double z1) { return 1.0 / (1.0 + std::exp(z1 - z0)); }  // softmax over 2, expert 0

TEST(ExpertChoice, OmpMatchesReferenceOnSweep) {
  std::vector<RouterConfig> bases;
  RouterConfig c = expert_choice();
  bases.push_back(c);  // cf 0 -> C = ceil(N k / E)
  c.score = ScoreFunction::sigmoid;
  c.routed_scaling_factor = 2.0;
  bases.push_back(c);
  test::sweep_omp_against_ref(bases, 303);
}

TEST(ExpertChoice, HandWorkedTwoExperts) {
  // N 4, E 2, k 1, cf 0: C = ceil(4 / 2) = 2. Softmax over two experts: p0 = sigmoid(z0 - z1).
  // Expert 0 ranks t0 (.881) > t3 (.731) > t1 (.5) > t2 (.269); expert 1 the reverse.
  const std::vector<float> logits = {2.f, 0.f, 0.f, 0.f, 0.f, 1.f, 1.f, 0.f};
  for (int b = 0; b < 2; ++b) {
    const Routing r = kBoth[b](expert_choice(), make_request(logits, 4, 2, 1), nullptr);
    EXPECT_EQ(r.capacity, 2) << kNames[b];
    EXPECT_EQ(r.token, (std::vector<int32_t>{0, 3, 2, 1})) << kNames[b];
    EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 0, 1, 1})) << kNames[b];
    const std::vector<double> want = {p0(2, 0), p0(1, 0), p0(1, 0), 0.5};
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(r.weight[i], want[i], kHandTolerance) << kNames[b] << " " << i;
    EXPECT_EQ(r.kept, (std::vector<uint8_t>{1, 1, 1, 1})) << kNames[b];
  }
}

TEST(ExpertChoice, TokensGetZeroToManyExperts) {
  // N 3, E 3, k 1: C = 1. t0 = (5, 5, -5) is the best token of experts 0 and 1; t2 = (0, -5, 0) of
  // expert 2; t1 = (0, 0, 0) of none.
  const std::vector<float> logits = {5.f, 5.f, -5.f, 0.f, 0.f, 0.f, 0.f, -5.f, 0.f};
  for (int b = 0; b < 2; ++b) {
    const Routing r = kBoth[b](expert_choice(), make_request(logits, 3, 3, 1), nullptr);
    EXPECT_EQ(r.token, (std::vector<int32_t>{0, 0, 2})) << kNames[b];
    EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 1, 2})) << kNames[b];
    EXPECT_NEAR(r.weight[0], 1.0 / (2.0 + std::exp(-10.0)), kHandTolerance) << kNames[b];
    EXPECT_NEAR(r.weight[2], 1.0 / (2.0 + std::exp(-5.0)), kHandTolerance) << kNames[b];
  }
}

TEST(ExpertChoice, TiesGoToLowerToken) {
  const std::vector<float> logits(6 * 4, 0.f);  // every score 1/4
  RouterConfig cfg = expert_choice();
  cfg.capacity_factor = 1.5;  // C = ceil(1.5 * 6 * 1 / 4) = 3
  for (int b = 0; b < 2; ++b) {
    const Routing r = kBoth[b](cfg, make_request(logits, 6, 4, 1), nullptr);
    ASSERT_EQ(r.capacity, 3) << kNames[b];
    for (int e = 0; e < 4; ++e) {
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(r.token[e * 3 + c], c) << kNames[b];
        EXPECT_EQ(r.expert[e * 3 + c], e) << kNames[b];
        EXPECT_FLOAT_EQ(r.weight[e * 3 + c], 0.25f) << kNames[b];
      }
    }
  }
}

TEST(ExpertChoice, SequenceGroupsWithShortLastGroup) {
  // Groups of 2 tokens, C = ceil(2 * 1 / 2) = 1 per expert per group. Group 0 {t0 (2,0), t1 (0,0)}:
  // e0 takes t0, e1 takes t1. Group 1 {t2 (0,1), t3 (1,0)}: e0 t3, e1 t2. Group 2 {t4}: both take t4.
  const std::vector<float> logits = {2.f, 0.f, 0.f, 0.f, 0.f, 1.f, 1.f, 0.f, 0.3f, -0.3f};
  RouterConfig cfg = expert_choice();
  cfg.capacity_scope = CapacityScope::sequence;
  for (int b = 0; b < 2; ++b) {
    RouteRequest req = make_request(logits, 5, 2, 1);
    req.sequence_length = 2;
    const Routing r = kBoth[b](cfg, req, nullptr);
    EXPECT_EQ(r.capacity, 1) << kNames[b];
    EXPECT_EQ(r.token, (std::vector<int32_t>{0, 1, 3, 2, 4, 4})) << kNames[b];
    EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 1, 0, 1, 0, 1})) << kNames[b];
  }
}

TEST(ExpertChoice, CapacityRule) {
  RouterConfig cfg = expert_choice();
  EXPECT_EQ(expert_choice_capacity(cfg, 333, 2, 8), 84);  // cf 0 read as 1: ceil(666 / 8)
  cfg.capacity_factor = 2.0;
  EXPECT_EQ(expert_choice_capacity(cfg, 333, 2, 8), 167);
  EXPECT_EQ(expert_choice_capacity(cfg, 7, 2, 1), 7);  // ceil(28) clamps to N
  cfg.min_capacity = 4;
  cfg.capacity_factor = 0.1;
  EXPECT_EQ(expert_choice_capacity(cfg, 100, 1, 50), 4);  // ceil(0.2) = 1 -> min_capacity
}

TEST(ExpertChoice, EveryExpertTakesExactlyCTokens) {
  for (double cf : {0.0, 0.5, 1.0, 2.0, 7.0}) {
    for (int num_e : {3, 8, 60}) {
      const uint64_t seed = 40 + num_e;
      const std::vector<float> logits = random_logits(333, num_e, seed);
      RouterConfig cfg = expert_choice();
      cfg.capacity_factor = cf;
      const Routing r = route_omp(cfg, make_request(logits, 333, num_e, 2), nullptr);
      const int64_t c = expert_choice_capacity(cfg, 333, 2, num_e);
      ASSERT_LE(c, 333);
      EXPECT_EQ(r.capacity, c);
      for (int64_t load : test::expert_loads(r)) EXPECT_EQ(load, c) << "cf " << cf << " E " << num_e << " seed " << seed;
      EXPECT_DOUBLE_EQ(test::imbalance(test::expert_loads(r)), 1.0);
      // Within an expert, descending score; a token appears at most once per expert.
      for (int e = 0; e < num_e; ++e) {
        for (int64_t i = e * c + 1; i < (e + 1) * c; ++i) {
          EXPECT_GE(r.weight[i - 1], r.weight[i]);
          EXPECT_NE(r.token[i - 1], r.token[i]);
        }
      }
    }
  }
}

}  // namespace
}  // namespace moesim
