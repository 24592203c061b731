// Rebalancing an expert-parallel placement over a run's steps (docs/cost-model.md "Rebalancing"): the
// load estimator a re-plan starts from (window sum or exponential moving average), which steps re-plan,
// and the modeled run of every step under its epoch's plan beside the static plan of step 0, with the
// predicted (planner) and realised balancedness per step, as vLLM's EPLB logs them. Pure arithmetic,
// deterministic, host only. Covered by tests/cost/rebalance_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/cost/placement.hpp"

namespace moesim {

// Whether step `step` re-plans: rebalance_every > 0, step > 0 and step a multiple of rebalance_every.
bool is_replan_step(const PlacementConfig& placement, int step);

// The planner's loads [num_experts] from the loads of the steps seen so far, observed [steps][num_experts]
// (at least one step):
//  - window: the sum of the last min(rebalance_every, steps) steps (rebalance_every 0: the last step);
//  - ema: est_0 = load_0, est_t = a load_t + (1 - a) est_{t-1}, a = placement.ema_weight.
std::vector<double> estimate_plan_load(const std::vector<std::vector<int64_t>>& observed,
                                       const PlacementConfig& placement);

// One step of a rebalanced run.
struct RebalanceStep {
  int step = 0;
  int epoch = 0;                       // index into RebalanceRun::epochs
  bool rebalanced = false;             // a new plan starts at this step
  double predicted_balancedness = 1;   // mean / max of the plan's own device loads (the planner's view)
  double realised_balancedness = 1;    // mean / max of the step's device tokens on that plan
  double rank_imbalance = 1;           // max / mean of the same (its inverse)
  double static_rank_imbalance = 1;    // the step's tokens on the static plan (epoch 0)
  double layer_s = 0;                  // modeled MoE layer (quantized) on the epoch's plan
  double static_layer_s = 0;           // on the static plan
};

struct PlanEpoch {
  int first_step = 0;
  std::vector<double> plan_load;       // [num_experts] the estimator's loads it was planned from
  ExpertPlacement placement;
};

struct RebalanceRun {
  std::vector<PlanEpoch> epochs;
  std::vector<RebalanceStep> steps;
  std::vector<LayerCost> step_costs;   // every step on its epoch's plan, in step order
  LayerCost last;                      // the last step on its epoch's plan (step_costs.back())
  // Means over the steps from the first re-plan on (gain_steps of them; 0 without a re-plan).
  int gain_steps = 0;
  double rank_imbalance = 1, static_rank_imbalance = 1, layer_s = 0, static_layer_s = 0;
};

// Models every step of `steps` (one LayerCostInput per step, placement expert_parallel, placement_load
// ignored): step 0 plans from its own loads; each re-plan step from estimate_plan_load over the steps
// before it. Requires at least one step.
RebalanceRun model_rebalancing(const HardwareProfile& hw, const std::vector<LayerCostInput>& steps);

}  // namespace moesim
