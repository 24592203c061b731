// EPLB over time (docs/serve.md "EPLB over time"): a serving run whose routing drifts, each step's loads one draw of
// a timeline, and the expert-parallel plan either made once (from the loads before the run) or re-made every N
// steps from the loads of the steps since the last plan, as SGLang's and vLLM's EPLB re-plan from recorded loads.
// A re-plan moves the weights of the experts a GPU did not hold; the step that re-plans waits for the slowest GPU's
// transfer over its scale-out link. Host only, deterministic. Covered by tests/serve/eplb_timeline_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "src/cost/placement.hpp"
#include "src/serve/scheduler.hpp"
#include "src/step/serving_step.hpp"

namespace moesim {

// The most slots any device gains between two placements of the same slots: slots of `to` whose expert the device
// held in none of its slots of `from` (counted with multiplicity beyond what it held).
int64_t moved_slots_max(const ExpertPlacement& from, const ExpertPlacement& to);

struct EplbTimeline {
  std::vector<std::vector<int64_t>> loads;  // [draws][experts]: the routing over time, every rank's tokens a draw
  int64_t steps_per_draw = 50;              // steps each draw holds before the next
  int64_t rebalance_every = 0;              // steps between plans; 0: the plan made once, from `initial_plan`
  // The loads a re-plan is made from (src/cost/rebalance.hpp estimate_plan_load, as `moesim run` re-plans): window,
  // the steps since the last plan summed; ema, every step so far, each new one weighted ema_weight.
  LoadEstimator estimator = LoadEstimator::window;
  double ema_weight = 0.5;
  std::vector<int64_t> initial_plan;        // [experts] the loads the first plan is made from
  double expert_bytes = 0;                  // one expert's weights (every MoE layer moves its own)
  int moe_layers = 1;
  double link_bytes_per_s = 0, link_latency_s = 0;  // a GPU's receive link for moved weights
};

struct EplbTally {
  int64_t replans = 0, moved_slots = 0;  // moved_slots: the most any GPU received, summed over re-plans
  double transfer_s = 0;                 // the steps' waits for the weights
};

// The step model as a scheduler's cost, step by step along the timeline: step s runs draw (s / steps_per_draw) mod
// draws under the current plan; every rebalance_every steps the plan is re-made from the estimator's loads and
// the step waits moved_slots_max x expert_bytes x moe_layers / link + latency. `base`: the step model's
// input (its loads and plans replaced here; phase and sequences set per step). `tally` (may be null) counts. With
// `balanced_attention`, every rank runs the ranks' mean share (mean_shares).
StepCoster eplb_timeline_coster(const ServingStepInput& base, const EplbTimeline& timeline, EplbTally* tally,
                                bool balanced_attention = false);

}  // namespace moesim
