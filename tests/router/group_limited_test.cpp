// Tests of group-limited gating (router/group_limited.hpp, group_limited_ref.hpp): route_omp against
// route_ref over the sweep (both fills, both scores), a hand-worked DeepSeek-V3 case where the group
// limit changes the choice, group ties, and the preconditions on groups.
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "src/common/error.hpp"
#include "router/route.hpp"
#include "tests/support/router_support.hpp"

namespace moesim {
namespace {

using test::make_request;

using test::kBoth;
using test::kNames;
using test::RouteFn;
constexpr double kHandTolerance = 1e-6;  // hand values in double; the router rounds each weight to float once

double sig(double z) { return 1.0 / (1.0 + std::exp(-z)); }

RouterConfig group_limited(int groups, int topk_groups) {
  RouterConfig cfg;
  cfg.gating = Gating::group_limited;
  cfg.score = ScoreFunction::sigmoid;
  cfg.groups = groups;
  cfg.topk_groups = topk_groups;
  return cfg;
}

TEST(GroupLimited, OmpMatchesReferenceOnSweep) {
  std::vector<RouterConfig> bases;
  RouterConfig c = group_limited(1, 1);  // groups are set per shape by the sweep
  c.renormalize = true;
  c.routed_scaling_factor = 2.5;
  bases.push_back(c);  // DeepSeek-V3: sigmoid, renormalised, scaled
  c.group_mask_fill = GroupMaskFill::zero;
  bases.push_back(c);
  c.score = ScoreFunction::softmax;
  c.renormalize = false;
  c.group_mask_fill = GroupMaskFill::neg_inf;
  bases.push_back(c);
  test::sweep_omp_against_ref(bases, 808);
}

// E 8 in 4 groups {0,1} {2,3} {4,5} {6,7}; sigmoid scores
//   z = 3 -3 | 1 1 | 2.5 -4 | 0.1 0  ->  s = .953 .047 | .731 .731 | .924 .018 | .525 .5
// group scores (sum of the top 2): 1.0, 1.462, .942, 1.025 -> groups 1 and 3 survive (topk_groups 2).
// Plain top-2 takes experts 0 and 4; group-limited top-2 takes 2 and 3 (a tie at .731: lower first).
// A top-1 group score would have kept groups 0 and 2 instead, so this also checks the top-2 sum.
const std::vector<float> kHandLogits = {3.f, -3.f, 1.f, 1.f, 2.5f, -4.f, 0.1f, 0.f};

TEST(GroupLimited, HandWorkedGroupLimitChangesTheChoice) {
  for (int b = 0; b < 2; ++b) {
    const Routing plain = kBoth[b](group_limited(1, 1), make_request(kHandLogits, 1, 8, 2), nullptr);
    EXPECT_EQ(plain.expert, (std::vector<int32_t>{0, 4})) << kNames[b];
    RouterConfig cfg = group_limited(4, 2);
    const Routing r = kBoth[b](cfg, make_request(kHandLogits, 1, 8, 2), nullptr);
    EXPECT_EQ(r.expert, (std::vector<int32_t>{2, 3})) << kNames[b];
    EXPECT_NEAR(r.weight[0], sig(1.0), kHandTolerance) << kNames[b];
    EXPECT_NEAR(r.weight[1], sig(1.0), kHandTolerance) << kNames[b];
    cfg.renormalize = true;
    cfg.routed_scaling_factor = 2.5;
    const Routing rn = kBoth[b](cfg, make_request(kHandLogits, 1, 8, 2), nullptr);
    EXPECT_NEAR(rn.weight[0], 1.25, kHandTolerance) << kNames[b];
    EXPECT_NEAR(rn.weight[1], 1.25, kHandTolerance) << kNames[b];
    // Keeping 3 groups (1, 3, 0) brings expert 0 back; expert 4 (group 2) stays out: top-3 = 0, 2, 3.
    const Routing r3 = kBoth[b](group_limited(4, 3), make_request(kHandLogits, 1, 8, 3), nullptr);
    EXPECT_EQ(r3.expert, (std::vector<int32_t>{0, 2, 3})) << kNames[b];
  }
}

TEST(GroupLimited, FillModesAgreeWhenScoresArePositive) {
  // Without a bias, sigmoid and softmax scores are > 0, so a 0.0 fill never beats a survivor.
  const std::vector<float> logits = test::random_logits(100, 12, 31);
  for (ScoreFunction score : {ScoreFunction::sigmoid, ScoreFunction::softmax}) {
    RouterConfig a = group_limited(4, 2);
    a.score = score;
    RouterConfig z = a;
    z.group_mask_fill = GroupMaskFill::zero;
    EXPECT_TRUE(test::same_routing(route_omp(a, make_request(logits, 100, 12, 4), nullptr),
                                   route_omp(z, make_request(logits, 100, 12, 4), nullptr)));
  }
}

TEST(GroupLimited, GroupTiesGoToLowerGroupAndExpertTiesToLowerExpert) {
  const std::vector<float> logits(6, 0.f);  // 3 groups of 2, all equal
  for (int b = 0; b < 2; ++b) {
    const Routing r = kBoth[b](group_limited(3, 1), make_request(logits, 1, 6, 2), nullptr);
    EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 1})) << kNames[b];
    const Routing r2 = kBoth[b](group_limited(3, 2), make_request(logits, 1, 6, 3), nullptr);
    EXPECT_EQ(r2.expert, (std::vector<int32_t>{0, 1, 2})) << kNames[b];
  }
}

TEST(GroupLimited, SelectionStaysInsideTheSurvivingGroups) {
  const std::vector<float> logits = test::random_logits(200, 16, 9);
  const Routing r = route_omp(group_limited(4, 2), make_request(logits, 200, 16, 4), nullptr);
  for (int t = 0; t < 200; ++t) {
    int groups_used = 0;
    for (int g = 0; g < 4; ++g) {
      bool used = false;
      for (int j = 0; j < 4; ++j) used = used || r.expert[t * 4 + j] / 4 == g;
      groups_used += used;
    }
    EXPECT_LE(groups_used, 2) << "token " << t << " seed 9";
  }
}

TEST(GroupLimited, RejectsGroupLayoutsThatCannotWork) {
  const std::vector<float> logits(8, 0.f);
  EXPECT_THROW(route_omp(group_limited(3, 1), make_request(logits, 1, 8, 2), nullptr), PreconditionError);
  EXPECT_THROW(route_omp(group_limited(4, 5), make_request(logits, 1, 8, 2), nullptr), PreconditionError);
  EXPECT_THROW(route_ref(group_limited(4, 1), make_request(logits, 1, 8, 3), nullptr), PreconditionError);
}

}  // namespace
}  // namespace moesim
