// Rebalancing an expert-parallel placement over a run's steps (docs/cost-model.md "Rebalancing"): the
// load estimator a re-plan starts from (window sum or exponential moving average), which steps re-plan,
// and the modeled run of every step under its epoch's plan beside the static plan of step 0, with the
// predicted (planner) and realised balancedness per step, as vLLM's EPLB logs them. Pure arithmetic,
// deterministic, host only. Covered by tests/cost/rebalance_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/cost/placement.hpp"

namespace moesim {

// What an EPLB plan was made from (docs/cost-model.md "Where a plan comes from").
enum class PlanBasis {
  equal,    // equal loads: no batch seen yet (an engine's first plan before it has statistics)
  warmup,   // the loads of warm-up batches routed before the measured ones
  past,     // the loads of the measured batches before this one (a re-plan)
  profile,  // a recorded load profile (placement.plan_profile)
  oracle,   // the very batch it is charged for (placement.plan_from oracle)
};
const char* to_string(PlanBasis b);

// Whether step `step` re-plans: rebalance_every > 0, step > 0 and step a multiple of rebalance_every.
bool is_replan_step(const PlacementConfig& placement, int step);

// The planner's loads [num_experts] from the loads of the steps seen so far, observed [steps][num_experts]
// (at least one step):
//  - window: the sum of the last min(rebalance_every, steps) steps (rebalance_every 0: the last step);
//  - ema: est_0 = load_0, est_t = a load_t + (1 - a) est_{t-1}, a = placement.ema_weight.
std::vector<double> estimate_plan_load(const std::vector<std::vector<int64_t>>& observed,
                                       const PlacementConfig& placement);
// The ema estimator's step: est = load on the first step (est empty), else a load + (1 - a) est.
void ema_update(std::vector<double>& est, const std::vector<int64_t>& load, double a);

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
  PlanBasis basis = PlanBasis::equal;  // where they came from
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


// A plan's loads [num_experts] and where they came from.
struct PlanChoice {
  std::vector<double> load;
  PlanBasis basis = PlanBasis::equal;
  int batches = 0;  // batches the loads summarise (warmup, past); 0 otherwise
};
// One line for the placement section: "planned from the loads of 8 warm-up batches", "oracle: planned from
// the batch it is charged for", ...
std::string describe(const PlanChoice& c);

// The loads an expert-parallel plan is made from, batch after batch, as an engine sees them
// (placement.plan_from):
//  - oracle: each batch's own loads;
//  - profile: the given loads (a recorded profile), until a re-plan from past loads;
//  - past: the sum of the batches seen before (warm-up batches first), and at a re-plan estimate_plan_load over
//    them; before any, equal loads.
// A plan is made at the first batch, again at the first batch that has a past when the plan was of equal loads,
// and every rebalance_every batches after it (0: never again).
class PlanSource {
 public:
  PlanSource(const PlacementConfig& placement, int num_experts, std::vector<double> profile = {});
  // A batch routed before the measured ones (plan_from past): its loads join the past.
  void warm_up(const std::vector<int64_t>& load);
  // The plan for the next measured batch, whose own loads are `own` (read by the oracle only); records them as
  // seen. *replanned: whether a new plan starts at this batch (always at the first).
  const PlanChoice& next(const std::vector<int64_t>& own, bool* replanned = nullptr);
  const PlanChoice& current() const { return plan_; }
  // Whether the placement plans from loads at all (global or hierarchical EPLB).
  bool active() const { return active_; }

 private:
  PlacementConfig placement_;
  int num_experts_;
  bool active_;
  int measured_ = 0;        // measured batches handed out
  int since_plan_ = 0;      // measured batches on the current plan
  std::vector<std::vector<int64_t>> seen_;
  int warmup_ = 0;          // warm-up batches among seen_
  PlanChoice plan_;
  bool planned_ = false;
};

// Models every step of `steps` (one LayerCostInput per step, placement expert_parallel, placement_load
// ignored), each on the plan `source` hands out for it (re-planning every rebalance_every steps), beside the
// first plan (static). `source` may have seen warm-up batches. Requires at least one step.
RebalanceRun model_rebalancing(const HardwareProfile& hw, const std::vector<LayerCostInput>& steps, PlanSource source);

}  // namespace moesim
