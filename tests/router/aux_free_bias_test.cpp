// Tests of aux-loss-free bias balancing (router/aux_free_bias.hpp, aux_free_bias_ref.hpp): route_omp
// against route_ref over the sweep (three batches through one state), the hand-worked bias update and
// its effect, the HuggingFace zero-fill case where a masked expert wins, and falling imbalance.
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

double sig(double z) { return 1.0 / (1.0 + std::exp(-z)); }

RouterConfig aux_free(double rate) {
  RouterConfig cfg;
  cfg.gating = Gating::aux_free_bias;
  cfg.score = ScoreFunction::sigmoid;
  cfg.bias_update_rate = rate;
  return cfg;
}

float step(float b, double rate, double sign) { return static_cast<float>(static_cast<double>(b) + rate * sign); }

TEST(AuxFreeBias, OmpMatchesReferenceOnSweep) {
  std::vector<RouterConfig> bases;
  RouterConfig c = aux_free(0.05);  // large enough that the bias changes the routing within three batches
  c.renormalize = true;
  bases.push_back(c);
  c.group_mask_fill = GroupMaskFill::zero;
  c.score = ScoreFunction::softmax;
  bases.push_back(c);
  // Megatron's conventions: the update from the kept counts in float32, the float capacity ceiling.
  c.bias_update_counts = BiasUpdateCounts::kept;
  c.bias_update_arithmetic = BiasArithmetic::float32;
  c.capacity_rounding = CapacityRounding::float64;
  bases.push_back(c);
  test::sweep_omp_against_ref(bases, 909);
}

TEST(AuxFreeBias, HandWorkedUpdateSteersSelection) {
  // 4 identical tokens, logits (2, 0, 0, 0), k 1, rate 0.1. s = (.881, .5, .5, .5).
  // Batch 0: bias 0 -> all on e0; loads (4,0,0,0), mean 1 -> bias (-.1, .1, .1, .1).
  // Batch 1: .781 > .6 -> e0 again -> bias (-.2, .2, .2, .2).
  // Batch 2: .681 < .7 -> e1 (e1..e3 tie, lower wins), weight = unbiased s = .5 -> bias (-.1, .1, .3, .3).
  const std::vector<float> logits = {2.f, 0.f, 0.f, 0.f, 2.f, 0.f, 0.f, 0.f, 2.f, 0.f, 0.f, 0.f, 2.f, 0.f, 0.f, 0.f};
  for (int b = 0; b < 2; ++b) {
    RouterState state;
    const RouterConfig cfg = aux_free(0.1);
    std::vector<float> bias(4, 0.f);
    const std::vector<std::vector<double>> signs = {{-1, 1, 1, 1}, {-1, 1, 1, 1}, {1, -1, 1, 1}};
    const std::vector<int32_t> chosen = {0, 0, 1};
    for (int batch = 0; batch < 3; ++batch) {
      const Routing r = kBoth[b](cfg, make_request(logits, 4, 4, 1), &state);
      EXPECT_EQ(r.expert, std::vector<int32_t>(4, chosen[batch])) << kNames[b] << " batch " << batch;
      const double w = chosen[batch] == 0 ? sig(2.0) : 0.5;
      for (float v : r.weight) EXPECT_NEAR(v, w, 1e-6) << kNames[b];
      for (int e = 0; e < 4; ++e) bias[e] = step(bias[e], 0.1, signs[batch][e]);
      EXPECT_EQ(state.expert_bias, bias) << kNames[b] << " batch " << batch;
      EXPECT_EQ(state.batches_seen, batch + 1);
    }
  }
}

TEST(AuxFreeBias, ExactlyMeanLoadLeavesTheBiasAlone) {
  // Balanced demand (every expert at the mean): sign 0 everywhere.
  const std::vector<float> logits = {1.f, 0.f, 0.f, 1.f};  // token 0 -> e0, token 1 -> e1
  RouterState state;
  state.expert_bias = {0.25f, 0.125f};
  route_omp(aux_free(0.1), make_request(logits, 2, 2, 1), &state);
  EXPECT_EQ(state.expert_bias, (std::vector<float>{0.25f, 0.125f}));
}

TEST(AuxFreeBias, MaskedExpertWinsWithZeroFill) {
  // E 4 in 2 groups {0,1} {2,3}, keep 1 group, k 2, sigmoid of 0 = .5 everywhere,
  // bias (-.6, -.7, -.9, -.9) -> s' = (-.1, -.2, -.4, -.4); group scores -.3, -.8 -> group 0 kept.
  // neg_inf fill (vLLM, Megatron): top-2 of (-.1, -.2, -inf, -inf) = 0, 1.
  // zero fill (HuggingFace):       top-2 of (-.1, -.2, 0, 0)       = 2, 3: the masked group wins.
  // Weights are the unbiased s = .5 in both cases.
  const std::vector<float> logits(4, 0.f);
  for (int b = 0; b < 2; ++b) {
    for (GroupMaskFill fill : {GroupMaskFill::neg_inf, GroupMaskFill::zero}) {
      RouterConfig cfg = aux_free(0.0);
      cfg.groups = 2;
      cfg.topk_groups = 1;
      cfg.group_mask_fill = fill;
      RouterState state;
      state.expert_bias = {-0.6f, -0.7f, -0.9f, -0.9f};
      const Routing r = kBoth[b](cfg, make_request(logits, 1, 4, 2), &state);
      const std::vector<int32_t> want = fill == GroupMaskFill::neg_inf ? std::vector<int32_t>{0, 1}
                                                                       : std::vector<int32_t>{2, 3};
      EXPECT_EQ(r.expert, want) << kNames[b] << " fill " << to_string(fill);
      EXPECT_FLOAT_EQ(r.weight[0], 0.5f);
      EXPECT_FLOAT_EQ(r.weight[1], 0.5f);
    }
  }
}

TEST(AuxFreeBias, WithoutStateItIsGroupLimitedWithZeroBias) {
  const std::vector<float> logits = test::random_logits(50, 8, 12);
  RouterConfig a = aux_free(0.1);
  a.groups = 4;
  a.topk_groups = 2;
  RouterConfig g = a;
  g.gating = Gating::group_limited;
  EXPECT_TRUE(test::same_routing(route_omp(a, make_request(logits, 50, 8, 2), nullptr),
                                 route_omp(g, make_request(logits, 50, 8, 2), nullptr)));
}

TEST(AuxFreeBias, RejectsABiasOfTheWrongSize) {
  const std::vector<float> logits(8, 0.f);
  RouterState state;
  state.expert_bias.assign(3, 0.f);
  EXPECT_THROW(route_omp(aux_free(0.1), make_request(logits, 1, 8, 2), &state), PreconditionError);
  EXPECT_THROW(route_ref(aux_free(0.1), make_request(logits, 1, 8, 2), &state), PreconditionError);
}

TEST(AuxFreeBias, ImbalanceFallsOverRepeatedSkewedBatches) {
  // 3 hot experts of 16 (+3 on their logits), a fresh skewed batch each step, rate 1e-2.
  RouterState state;
  const RouterConfig cfg = aux_free(1e-2);
  std::vector<double> imbalance;
  for (int batch = 0; batch < 50; ++batch) {
    const std::vector<float> logits = test::skewed_logits(256, 16, 500 + batch, 3, 3.0);
    const Routing r = route_omp(cfg, make_request(logits, 256, 16, 2, batch), &state);
    imbalance.push_back(test::imbalance(test::expert_loads(r, false)));
  }
  double last = 0.0;
  for (int batch = 40; batch < 50; ++batch) last += imbalance[batch] / 10.0;
  EXPECT_GT(imbalance[0], 3.0) << "seeds 500..549";
  EXPECT_LT(last, 1.8) << "seeds 500..549";
  EXPECT_LT(last, 0.5 * imbalance[0]) << "seeds 500..549";
  EXPECT_EQ(state.batches_seen, 50);
}

}  // namespace
}  // namespace moesim
