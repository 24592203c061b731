// Runs a sweep point by point through run_experiment into rows (see run_sweep.hpp; src/report/sweep_report.cpp
// formats them).
// A whole-model time is one MoE layer's modeled time times the MoE layers (model.moe_layers, all of
// model.layers by default): every MoE layer is taken to route like the one simulated (same loads), which is
// what the batching argument needs (a dense MLP of L equal layers when model.experts == 1); the FFNs of dense
// layers are not modeled. Host only. Covered by tests/sweep/run_sweep_test.cpp.
#include "src/sweep/run_sweep.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "src/sweep/knee.hpp"
#include "src/workload/trace_replay.hpp"

namespace moesim {
namespace {

CostBreakdown scaled(const CostBreakdown& c, double f) {
  return {c.ideal_s * f, c.quantized_s * f};
}

SweepRow make_row(const RunResult& run, const std::vector<std::string>& values) {
  const VariantResult& v = run.variants.front();
  const ModeledPlacement& p = primary_placement(v);
  const Experiment& e = run.experiment;
  SweepRow row;
  row.values = values;
  row.gating = to_string(v.variant.router.gating);
  row.hardware = run.hardware.name;
  row.hardware_digest = hardware_digest(run.hardware);
  row.placement = p.placement;
  row.devices = p.devices;
  row.num_tokens = run.num_tokens;
  row.experts = e.model.experts;
  row.top_k = e.model.top_k;
  row.layers = e.model.layers;
  row.moe_layers = moe_layer_count(e.model);
  row.critical_batch = critical_batch(run.hardware, expert_format(e.model));
  row.actual = scaled(p.cost.actual, row.moe_layers);
  row.balanced = scaled(p.cost.balanced, row.moe_layers);
  add_scaled(row.erosion, p.cost.erosion, row.moe_layers);
  row.batching_efficiency = p.cost.batching_efficiency;
  row.batching_efficiency_exact = p.cost.batching_efficiency_exact;
  row.roofline_efficiency = p.cost.roofline_efficiency;
  row.balancedness = p.cost.balancedness;
  row.time_per_token_s = run.num_tokens > 0 ? row.actual.quantized_s / static_cast<double>(run.num_tokens) : 0.0;
  row.compute_bound_experts = p.cost.compute_bound_experts;
  // The headline values, as the modeled cost above is (a mean over the point's batches or records).
  row.imbalance = v.per_batch.size() > 1 ? headline_mean(v, &BalanceMetrics::imbalance) : v.last().imbalance;
  row.drop_rate = v.per_batch.size() > 1 ? headline_mean(v, &BalanceMetrics::drop_rate) : v.last().drop_rate;
  row.plan = p.cost.placement;
  row.device_plan_load = p.cost.device_plan_load;
  row.predicted_balancedness = p.cost.predicted_balancedness;
  row.realised_balancedness = p.cost.balancedness;
  if (v.executed) {
    row.measured = true;
    row.measured_layer_s = v.measured.layer_s;
    row.measured_experts_s = v.measured.experts_s;
    row.measured_balanced_layer_s = v.measured_balanced_layer_s;
    row.measured_layer_min_s = v.measured.layer_min_s;
    row.measured_layer_max_s = v.measured.layer_max_s;
    row.measured_balanced_layer_min_s = v.measured_balanced_layer_min_s;
    row.measured_balanced_layer_max_s = v.measured_balanced_layer_max_s;
    row.measured_noise = v.measured_noise;
  }
  return row;
}

}  // namespace

SweepResult run_sweep(const Experiment& base, const std::vector<SweepAxis>& axes, const SweepOptions& opts) {
  SweepResult out;
  out.experiment = base.name;
  out.source_file = base.source_file;
  out.base = base;
  out.hardware = load_hardware_profile(base.hardware, base.source_file);
  out.axes = axes;
  const std::vector<SweepPoint> points = sweep_points(axes);
  // Every point is built (and so validated) before the first one runs.
  std::vector<Experiment> experiments;
  experiments.reserve(points.size());
  for (const SweepPoint& point : points) {
    Experiment e = base;
    // The point's settings together: a combination is checked whole, in any order of the axes.
    try {
      apply_overrides(e, point.settings);
    } catch (const ConfigError& ex) {
      // In the user's words: the point's values came from --vary, not from a --set.
      std::string message = ex.what();
      for (const std::string& s : point.settings) {
        for (size_t at = message.find("--set " + s); at != std::string::npos; at = message.find("--set " + s, at))
          message.replace(at, 5, "--vary");
      }
      throw ConfigError(message);
    }
    if (opts.measure) e.execute.enabled = true;
    experiments.push_back(std::move(e));
  }
  // A trace without logits is replayed as recorded: points that differ only in router.gating would be
  // identical rows, so varying the gating over such a trace is an input error naming "logits".
  bool gating_varies = false;
  for (const Experiment& e : experiments) gating_varies = gating_varies || e.router.gating != experiments.front().router.gating;
  if (gating_varies) {
    std::set<std::string> checked;
    for (const Experiment& e : experiments) {
      if (e.workload.source != WorkloadSource::trace) continue;
      const std::string path = resolve_workload_path(e);
      if (!checked.insert(path).second) continue;
      if (!trace_can_reroute(path, e.model.experts)) {
        throw InputError(path + ": \"logits\": expected on every line for --vary router.gating (re-routing), got "
                         "none: a trace without logits is only replayed as recorded");
      }
    }
  }
  if (opts.before_run) opts.before_run(experiments);
  RunOptions run_opts;
  run_opts.execute = opts.measure;
  run_opts.memory_limit_bytes = opts.memory_limit_bytes;
  for (size_t p = 0; p < points.size(); ++p) {
    const RunResult run = run_experiment(experiments[p], own_variant(experiments[p]), run_opts);
    out.rows.push_back(make_row(run, points[p].values));
    if (opts.progress) opts.progress(p + 1, points.size());
  }
  out.knees = sweep_knees(out);
  return out;
}

std::vector<SweepKnee> sweep_knees(const SweepResult& sweep) {
  std::vector<SweepKnee> knees;
  size_t batch_axis = sweep.axes.size();
  for (size_t a = 0; a < sweep.axes.size(); ++a)
    for (const std::string& k : sweep.axes[a].keys)
      if (k == "workload.batch") batch_axis = a;
  if (batch_axis == sweep.axes.size()) return knees;
  for (size_t i = 0; i < sweep.rows.size(); ++i) {
    std::vector<std::string> key = sweep.rows[i].values;
    key[batch_axis] = "";
    auto it = std::find_if(knees.begin(), knees.end(), [&](const SweepKnee& k) { return k.values == key; });
    if (it == knees.end()) {
      knees.push_back(SweepKnee{key, {}, {}, {}, {}});
      it = knees.end() - 1;
    }
    it->rows.push_back(i);
  }
  for (SweepKnee& k : knees) {
    std::stable_sort(k.rows.begin(), k.rows.end(),
                     [&](size_t a, size_t b) { return sweep.rows[a].num_tokens < sweep.rows[b].num_tokens; });
    std::vector<int64_t> tokens;
    std::vector<double> actual, balanced;
    for (size_t r : k.rows) {
      const SweepRow& row = sweep.rows[r];
      // A repeated batch (an axis listing it twice) or an empty time has no slope: no knee for this curve.
      if (row.num_tokens <= 0 || row.actual.quantized_s <= 0 || row.balanced.quantized_s <= 0 ||
          (!tokens.empty() && row.num_tokens == tokens.back())) {
        tokens.clear();
        break;
      }
      tokens.push_back(row.num_tokens);
      actual.push_back(row.actual.quantized_s);
      balanced.push_back(row.balanced.quantized_s);
    }
    if (tokens.size() < 2) continue;
    k.tokens = knee_tokens(tokens, actual);
    k.balanced_tokens = knee_tokens(tokens, balanced);
    if (!k.tokens) continue;
    double sum = 0;
    int n = 0;
    for (size_t r : k.rows) {
      const SweepRow& row = sweep.rows[r];
      // What imbalance costs (its tile-phase mean, savings apart) over the balanced counterfactual's time.
      const double balanced_s = row.erosion.actual_s - imbalance_total_s(row.erosion);
      if (row.num_tokens < *k.tokens || balanced_s <= 0) continue;
      sum += imbalance_cost_s(row.erosion) / balanced_s;
      ++n;
    }
    if (n > 0) k.imbalance_cost_past = sum / n;
  }
  return knees;
}

}  // namespace moesim
