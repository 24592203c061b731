// Tests src/cost/rebalance: the re-plan rule, the window and ema load estimators by hand, where a plan's loads
// come from (PlanSource: equal loads, warm-up, past, profile, oracle), a past-load plan against an oracle plan on
// 3 batches, and a modeled 4-step run whose hot pairing changes, re-planned against the static first plan
// (epochs, predicted against realised balancedness, the gain). Host only.
#include "src/cost/rebalance.hpp"

#include <gtest/gtest.h>

#include "tests/support/cost_support.hpp"

namespace moesim {
namespace {

// The toy accelerator of tests/support/cost_support.hpp (links 100 GB/s, 1 us latency).
HardwareProfile toy(const std::string& extra = "") { return test::toy_profile(extra); }

PlacementConfig global(int devices, int every, LoadEstimator est = LoadEstimator::window, double weight = 0.5) {
  PlacementConfig p;
  p.kind = PlacementKind::expert_parallel;
  p.policy = PlacementPolicy::global;
  p.devices = devices;
  p.rebalance_every = every;
  p.load_estimator = est;
  p.ema_weight = weight;
  p.a2a_kernel = A2aKernel::simple;  // moesim's first all-to-all: the hand-worked link times
  return p;
}

std::vector<LayerCostInput> steps_of(const std::vector<std::vector<int64_t>>& loads, const PlacementConfig& pc) {
  std::vector<LayerCostInput> out;
  for (const auto& l : loads) {
    LayerCostInput in;
    in.hidden = 64;
    in.ffn = 128;
    in.num_experts = static_cast<int>(l.size());
    in.top_k = 1;
    in.format = Dtype::fp16;
    in.num_tokens = 10;
    in.load = l;
    in.placement = pc;
    out.push_back(in);
  }
  return out;
}

TEST(Rebalance, ReplanSteps) {
  const PlacementConfig p = global(2, 2);
  EXPECT_FALSE(is_replan_step(p, 0));
  EXPECT_FALSE(is_replan_step(p, 1));
  EXPECT_TRUE(is_replan_step(p, 2));
  EXPECT_FALSE(is_replan_step(p, 3));
  EXPECT_TRUE(is_replan_step(p, 4));
  EXPECT_FALSE(is_replan_step(global(2, 0), 2));
}

TEST(Rebalance, LoadEstimatorsByHand) {
  const std::vector<std::vector<int64_t>> seen = {{1, 2}, {3, 4}, {5, 6}};
  // window: the last rebalance_every steps, summed.
  EXPECT_EQ(estimate_plan_load(seen, global(2, 2)), (std::vector<double>{8, 10}));
  EXPECT_EQ(estimate_plan_load(seen, global(2, 5)), (std::vector<double>{9, 12}));  // fewer steps than the window
  // ema with weight 0.5: [1, 2] -> [2, 3] -> [3.5, 4.5].
  EXPECT_EQ(estimate_plan_load(seen, global(2, 2, LoadEstimator::ema, 0.5)), (std::vector<double>{3.5, 4.5}));
  // weight 1 is the last step alone.
  EXPECT_EQ(estimate_plan_load(seen, global(2, 2, LoadEstimator::ema, 1.0)), (std::vector<double>{5, 6}));
}

TEST(Rebalance, ReplanFollowsTheLoads) {
  // Step 0 [4, 3, 2, 1] plans {e0, e3} on d0 and {e1, e2} on d1. Steps 2 and 3 route [4, 1, 3, 2]: on the
  // static plan 6 against 4 (max/mean 1.2). The re-plan at step 2 from the window of steps 0 and 1
  // ([4, 3, 2, 1] + [4, 0, 5, 3] = [8, 3, 7, 4]) pairs {e0, e1} and {e2, e3}: 5 and 5 (1.0).
  const std::vector<std::vector<int64_t>> loads = {{4, 3, 2, 1}, {4, 0, 5, 3}, {4, 1, 3, 2}, {4, 1, 3, 2}};
  // The past before step 0 looked like step 0 (one warm-up batch of its loads), so the first plan is its.
  const auto warmed = [&](const PlacementConfig& pc) {
    PlanSource s(pc, 4);
    s.warm_up(loads[0]);
    return s;
  };
  const RebalanceRun run = model_rebalancing(toy(), steps_of(loads, global(2, 2)), warmed(global(2, 2)));
  ASSERT_EQ(run.epochs.size(), 2u);
  EXPECT_EQ(run.epochs[0].first_step, 0);
  EXPECT_EQ(run.epochs[0].placement.expert, (std::vector<int32_t>{0, 3, 1, 2}));
  EXPECT_EQ(run.epochs[1].first_step, 2);
  EXPECT_EQ(run.epochs[1].plan_load, (std::vector<double>{8, 3, 7, 4}));
  EXPECT_EQ(run.epochs[1].placement.expert, (std::vector<int32_t>{0, 1, 2, 3}));
  ASSERT_EQ(run.steps.size(), 4u);
  EXPECT_FALSE(run.steps[1].rebalanced);
  EXPECT_TRUE(run.steps[2].rebalanced);
  EXPECT_EQ(run.steps[3].epoch, 1);
  // Step 1 on the static plan: d0 = 4 + 3, d1 = 0 + 5; realised 6 / 7, predicted (its own plan) 1.
  EXPECT_DOUBLE_EQ(run.steps[1].realised_balancedness, 6.0 / 7.0);
  EXPECT_DOUBLE_EQ(run.steps[1].predicted_balancedness, 1.0);
  // Step 2: predicted from [8, 3, 7, 4] (11 and 11), realised 5 and 5.
  EXPECT_DOUBLE_EQ(run.steps[2].predicted_balancedness, 1.0);
  EXPECT_DOUBLE_EQ(run.steps[2].realised_balancedness, 1.0);
  EXPECT_DOUBLE_EQ(run.steps[2].static_rank_imbalance, 1.2);
  EXPECT_EQ(run.gain_steps, 2);
  EXPECT_DOUBLE_EQ(run.rank_imbalance, 1.0);
  EXPECT_DOUBLE_EQ(run.static_rank_imbalance, 1.2);
  EXPECT_LT(run.layer_s, run.static_layer_s);
  EXPECT_EQ(run.last.device_tokens, (std::vector<int64_t>{5, 5}));
  // ema (weight 0.5): [4, 3, 2, 1] -> [4, 1.5, 3.5, 2], the same pairing.
  // The warm-up batch and step 0 both [4, 3, 2, 1], then step 1.
  const RebalanceRun ema = model_rebalancing(toy(), steps_of(loads, global(2, 2, LoadEstimator::ema, 0.5)),
                                             warmed(global(2, 2, LoadEstimator::ema, 0.5)));
  EXPECT_EQ(ema.epochs[1].plan_load, (std::vector<double>{4, 1.5, 3.5, 2}));
  EXPECT_EQ(ema.epochs[1].placement.expert, (std::vector<int32_t>{0, 1, 2, 3}));
  // Without re-planning: one epoch, no gain.
  const RebalanceRun none = model_rebalancing(toy(), steps_of(loads, global(2, 0)), warmed(global(2, 0)));
  EXPECT_EQ(none.epochs.size(), 1u);
  EXPECT_EQ(none.gain_steps, 0);
}

TEST(PlanSource, WhereEachPlanComesFrom) {
  // No batch seen: equal loads; the first batch with a past re-plans from it, once (rebalance_every 0).
  PlanSource fresh(global(2, 0), 2);
  bool replanned = false;
  EXPECT_EQ(fresh.next({3, 1}, &replanned).basis, PlanBasis::equal);
  EXPECT_TRUE(replanned);
  EXPECT_EQ(fresh.current().load, (std::vector<double>{1, 1}));
  EXPECT_EQ(fresh.next({5, 1}, &replanned).basis, PlanBasis::past);
  EXPECT_TRUE(replanned);
  EXPECT_EQ(fresh.current().load, (std::vector<double>{3, 1}));  // all the past: batch 0
  EXPECT_EQ(fresh.next({9, 9}, &replanned).load, (std::vector<double>{3, 1}));
  EXPECT_FALSE(replanned);
  // Warm-up batches make the first plan (their sum); every 2 batches a re-plan from the last 2 seen.
  PlanSource warm(global(2, 2), 2);
  warm.warm_up({1, 0});
  warm.warm_up({2, 1});
  EXPECT_EQ(warm.next({7, 7}, &replanned).basis, PlanBasis::warmup);
  EXPECT_EQ(warm.current().load, (std::vector<double>{3, 1}));
  EXPECT_EQ(warm.current().batches, 2);
  warm.next({1, 1}, &replanned);
  EXPECT_FALSE(replanned);
  EXPECT_EQ(warm.next({0, 0}, &replanned).basis, PlanBasis::past);
  EXPECT_TRUE(replanned);
  EXPECT_EQ(warm.current().load, (std::vector<double>{8, 8}));  // [7, 7] + [1, 1]
  // A profile plans until the first re-plan; the oracle takes each batch's own loads.
  PlacementConfig profile = global(2, 0);
  profile.plan_from = PlanFrom::profile;
  PlanSource recorded(profile, 2, {4, 1});
  EXPECT_EQ(recorded.next({1, 4}).load, (std::vector<double>{4, 1}));
  EXPECT_EQ(recorded.current().basis, PlanBasis::profile);
  PlacementConfig oracle = global(2, 0);
  oracle.plan_from = PlanFrom::oracle;
  PlanSource own(oracle, 2);
  EXPECT_EQ(own.next({1, 4}).load, (std::vector<double>{1, 4}));
  EXPECT_EQ(own.next({6, 2}).basis, PlanBasis::oracle);
  EXPECT_EQ(own.current().load, (std::vector<double>{6, 2}));
  // A static policy plans from nothing.
  PlacementConfig contiguous = global(2, 0);
  contiguous.policy = PlacementPolicy::contiguous;
  EXPECT_FALSE(PlanSource(contiguous, 2).active());
  EXPECT_TRUE(PlanSource(global(2, 0), 2).active());
}

TEST(PlanSource, PastLoadsAgainstTheOracleOnThreeBatches) {
  // 4 experts on 2 devices, EPLB global without replicas, 10 tokens of k = 1 a batch. One warm-up batch
  // [4, 3, 2, 1] plans {e0, e3} | {e1, e2} (loads 5 | 5), kept for every batch (rebalance_every 0).
  //   batch 0 [4, 3, 2, 1]: past plan 5 | 5; the oracle plans the same pairs: 5 | 5.
  //   batch 1 [1, 4, 3, 2]: past plan e0 + e3 = 3, e1 + e2 = 7 (max/mean 1.4); the oracle packs e1 (4) then e2
  //            (3) onto the lighter device: {e1, e0} = 5 | {e2, e3} = 5 (1.0).
  //   batch 2 [2, 1, 4, 3]: past plan 5 | 5; the oracle: {e2, e1} = 5 | {e3, e0} = 5.
  // So the oracle's mean rank imbalance is 1.0 and the past plan's (1 + 1.4 + 1) / 3.
  const std::vector<std::vector<int64_t>> loads = {{4, 3, 2, 1}, {1, 4, 3, 2}, {2, 1, 4, 3}};
  PlanSource past(global(2, 0), 4);
  past.warm_up({4, 3, 2, 1});
  PlacementConfig oracle_pc = global(2, 0);
  oracle_pc.plan_from = PlanFrom::oracle;
  PlanSource oracle(oracle_pc, 4);
  double past_rank = 0, oracle_rank = 0;
  std::vector<double> past_layer, oracle_layer;
  for (const LayerCostInput& step : steps_of(loads, global(2, 0))) {
    LayerCostInput in = step;
    in.placement_load = past.next(in.load).load;
    const LayerCost p = model_moe_layer(toy(), in);
    in.placement_load = oracle.next(in.load).load;
    const LayerCost o = model_moe_layer(toy(), in);
    past_rank += p.rank_imbalance / 3;
    oracle_rank += o.rank_imbalance / 3;
    past_layer.push_back(p.actual.quantized_s);
    oracle_layer.push_back(o.actual.quantized_s);
  }
  EXPECT_DOUBLE_EQ(oracle_rank, 1.0);
  EXPECT_DOUBLE_EQ(past_rank, (1.0 + 1.4 + 1.0) / 3);
  EXPECT_DOUBLE_EQ(past_layer[0], oracle_layer[0]);
  EXPECT_GT(past_layer[1], oracle_layer[1]);  // the oracle knew batch 1
  EXPECT_DOUBLE_EQ(past_layer[2], oracle_layer[2]);
}

}  // namespace
}  // namespace moesim
