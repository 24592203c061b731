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
  if (p.load_estimator == LoadEstimator::ema) {
    const double a = p.ema_weight;
    MOESIM_REQUIRE(a > 0 && a <= 1, "placement.ema_weight must be in (0, 1], got " << a);
    std::vector<double> ema;
    for (const std::vector<int64_t>& load : observed) ema_update(ema, load, a);
    return ema;
  }
  std::vector<double> est(E, 0.0);
  const size_t window = std::min(observed.size(), static_cast<size_t>(std::max(1, p.rebalance_every)));
  for (size_t t = observed.size() - window; t < observed.size(); ++t)
    for (size_t e = 0; e < E; ++e) est[e] += static_cast<double>(observed[t][e]);
  return est;
}

void ema_update(std::vector<double>& est, const std::vector<int64_t>& load, double a) {
  if (est.empty()) {
    est.assign(load.begin(), load.end());
    return;
  }
  for (size_t e = 0; e < est.size(); ++e) est[e] = a * static_cast<double>(load[e]) + (1 - a) * est[e];
}

const char* to_string(PlanBasis b) {
  switch (b) {
    case PlanBasis::equal: return "equal";
    case PlanBasis::warmup: return "warmup";
    case PlanBasis::past: return "past";
    case PlanBasis::profile: return "profile";
    case PlanBasis::oracle: return "oracle";
  }
  return "?";
}

std::string describe(const PlanChoice& c) {
  switch (c.basis) {
    case PlanBasis::equal: return "planned from equal loads (no batch seen before this one)";
    case PlanBasis::warmup: return "planned from the loads of " + std::to_string(c.batches) + " warm-up batches";
    case PlanBasis::past: return "planned from the loads of the " + std::to_string(c.batches) + " batches before";
    case PlanBasis::profile: return "planned from the recorded profile (placement.plan_profile)";
    case PlanBasis::oracle: return "oracle: planned from the very batch it is charged for";
  }
  return "?";
}

PlanSource::PlanSource(const PlacementConfig& placement, int num_experts, std::vector<double> profile)
    : placement_(placement), num_experts_(num_experts), active_(plans_from_loads(placement)) {
  MOESIM_REQUIRE(num_experts >= 1, "PlanSource needs at least one expert");
  if (placement.plan_from == PlanFrom::profile) {
    MOESIM_REQUIRE(static_cast<int>(profile.size()) == num_experts,
                   "the plan profile has " << profile.size() << " experts, expected " << num_experts);
    plan_.load = std::move(profile);
    plan_.basis = PlanBasis::profile;
  }
}

void PlanSource::warm_up(const std::vector<int64_t>& load) {
  MOESIM_REQUIRE(measured_ == 0, "warm-up batches come before the measured ones");
  seen_.push_back(load);
  ++warmup_;
}

const PlanChoice& PlanSource::next(const std::vector<int64_t>& own, bool* replanned) {
  MOESIM_REQUIRE(static_cast<int>(own.size()) == num_experts_,
                 "the batch has " << own.size() << " experts, expected " << num_experts_);
  bool fresh = false;
  if (placement_.plan_from == PlanFrom::oracle) {
    plan_.load.assign(own.begin(), own.end());
    plan_.basis = PlanBasis::oracle;
    fresh = true;
  } else {
    const bool first = !planned_;
    const bool past_now = plan_.basis == PlanBasis::equal && !seen_.empty();
    const bool due = planned_ && placement_.rebalance_every > 0 && since_plan_ >= placement_.rebalance_every;
    if (first && plan_.basis == PlanBasis::profile) {
      fresh = true;
    } else if ((first || past_now || due) && !seen_.empty()) {
      // A re-plan takes load_estimator over the last rebalance_every batches seen; the first plan with a past
      // sums all of it (the warm-up batches, or the batches before).
      PlacementConfig window = placement_;
      if (!due) {
        window.load_estimator = LoadEstimator::window;
        window.rebalance_every = static_cast<int>(seen_.size());
      }
      plan_.load = estimate_plan_load(seen_, window);
      plan_.batches = window.load_estimator == LoadEstimator::ema
                          ? static_cast<int>(seen_.size())
                          : std::min(static_cast<int>(seen_.size()), window.rebalance_every);
      plan_.basis = measured_ == 0 ? PlanBasis::warmup : PlanBasis::past;
      fresh = true;
    } else if (first) {
      plan_.load.assign(num_experts_, 1.0);
      plan_.basis = PlanBasis::equal;
      plan_.batches = 0;
      fresh = true;
    }
  }
  if (fresh) since_plan_ = 0;
  planned_ = true;
  ++since_plan_;
  ++measured_;
  seen_.push_back(own);
  if (replanned) *replanned = fresh;
  return plan_;
}

RebalanceRun model_rebalancing(const HardwareProfile& hw, const std::vector<LayerCostInput>& steps, PlanSource source) {
  MOESIM_REQUIRE(!steps.empty(), "model_rebalancing needs at least one step");
  const PlacementConfig& pc = steps.front().placement;
  MOESIM_REQUIRE(pc.kind == PlacementKind::expert_parallel, "model_rebalancing needs an expert_parallel placement");
  RebalanceRun run;
  double sum_rank = 0, sum_static_rank = 0, sum_layer = 0, sum_static_layer = 0;
  for (size_t b = 0; b < steps.size(); ++b) {
    const int step = static_cast<int>(b);
    LayerCostInput in = steps[b];
    RebalanceStep rs;
    rs.step = step;
    bool replanned = false;
    const PlanChoice& choice = source.next(in.load, &replanned);
    if (replanned) {
      PlanEpoch ep;
      ep.first_step = step;
      ep.plan_load = choice.load;
      ep.basis = choice.basis;
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
