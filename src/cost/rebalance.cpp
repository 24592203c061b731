// Rebalancing over a run's steps (see rebalance.hpp): the load estimators, the re-plan rule and the
// modeled run per epoch against the static plan. Deterministic, host only. Covered by
// tests/cost/rebalance_test.cpp.
#include "src/cost/rebalance.hpp"

#include <algorithm>

#include "src/common/error.hpp"

namespace moesim {

bool is_replan_step(const PlacementConfig& p, int step) {
  return p.rebalance_every > 0 && step > 0 && step % p.rebalance_every == 0;
}

std::vector<double> estimate_plan_load(const std::vector<std::vector<int64_t>>& observed, const PlacementConfig& p) {
  MOESIM_REQUIRE(!observed.empty(), "the load estimator needs at least one observed step");
  const size_t E = observed.front().size();
  std::vector<double> est(E, 0.0);
  if (p.load_estimator == LoadEstimator::ema) {
    const double a = p.ema_weight;
    MOESIM_REQUIRE(a > 0 && a <= 1, "placement.ema_weight must be in (0, 1], got " << a);
    for (size_t e = 0; e < E; ++e) est[e] = static_cast<double>(observed.front()[e]);
    for (size_t t = 1; t < observed.size(); ++t)
      for (size_t e = 0; e < E; ++e) est[e] = a * static_cast<double>(observed[t][e]) + (1 - a) * est[e];
    return est;
  }
  const size_t window = std::min(observed.size(), static_cast<size_t>(std::max(1, p.rebalance_every)));
  for (size_t t = observed.size() - window; t < observed.size(); ++t)
    for (size_t e = 0; e < E; ++e) est[e] += static_cast<double>(observed[t][e]);
  return est;
}

RebalanceRun model_rebalancing(const HardwareProfile& hw, const std::vector<LayerCostInput>& steps) {
  MOESIM_REQUIRE(!steps.empty(), "model_rebalancing needs at least one step");
  const PlacementConfig& pc = steps.front().placement;
  MOESIM_REQUIRE(pc.kind == PlacementKind::expert_parallel, "model_rebalancing needs an expert_parallel placement");
  RebalanceRun run;
  std::vector<std::vector<int64_t>> observed;
  double sum_rank = 0, sum_static_rank = 0, sum_layer = 0, sum_static_layer = 0;
  for (size_t b = 0; b < steps.size(); ++b) {
    const int step = static_cast<int>(b);
    LayerCostInput in = steps[b];
    RebalanceStep rs;
    rs.step = step;
    if (step == 0 || is_replan_step(pc, step)) {
      PlanEpoch ep;
      ep.first_step = step;
      ep.plan_load = step == 0 ? std::vector<double>(in.load.begin(), in.load.end()) : estimate_plan_load(observed, pc);
      ep.placement = place_experts_real(ep.plan_load, pc);
      run.epochs.push_back(std::move(ep));
      rs.rebalanced = step > 0;
    }
    rs.epoch = static_cast<int>(run.epochs.size()) - 1;
    in.placement_load = run.epochs.back().plan_load;
    LayerCost c = model_moe_layer(hw, in);
    rs.predicted_balancedness = c.predicted_balancedness;
    rs.realised_balancedness = c.balancedness;
    rs.rank_imbalance = c.rank_imbalance;
    rs.layer_s = c.actual.quantized_s;
    rs.static_rank_imbalance = rs.rank_imbalance;
    rs.static_layer_s = rs.layer_s;
    if (rs.epoch > 0) {
      in.placement_load = run.epochs.front().plan_load;
      const LayerCost s = model_moe_layer(hw, in);
      rs.static_rank_imbalance = s.rank_imbalance;
      rs.static_layer_s = s.actual.quantized_s;
      ++run.gain_steps;
      sum_rank += rs.rank_imbalance;
      sum_static_rank += rs.static_rank_imbalance;
      sum_layer += rs.layer_s;
      sum_static_layer += rs.static_layer_s;
    }
    if (b + 1 == steps.size()) run.last = c;
    run.step_costs.push_back(std::move(c));
    run.steps.push_back(rs);
    observed.push_back(steps[b].load);
  }
  if (run.gain_steps > 0) {
    const double n = run.gain_steps;
    run.rank_imbalance = sum_rank / n;
    run.static_rank_imbalance = sum_static_rank / n;
    run.layer_s = sum_layer / n;
    run.static_layer_s = sum_static_layer / n;
  }
  return run;
}

}  // namespace moesim
