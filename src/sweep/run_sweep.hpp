// Runs an experiment at every point of a sweep (sweep.hpp) and tabulates, per point, the modeled cost
// of the whole model's expert layers (one MoE layer's cost x model.moe_layers) for the actual and the
// balanced routing, batching efficiency, time per token, imbalance and drops, and with `measure` the
// executed layer's times (src/report/sweep_report.hpp formats them). Modeled columns are deterministic; measured ones
// are wall-clock. Host only. Covered by tests/sweep/run_sweep_test.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/cost/roofline.hpp"
#include "src/pipeline/results.hpp"
#include "src/sweep/sweep.hpp"

namespace moesim {

struct SweepOptions {
  bool measure = false;             // run the executed pipeline at each point (forces execute.enabled)
  double memory_limit_bytes = 0;    // 0: no limit (run_experiment's ResourceError otherwise)
  // Called after each point with (points done, points in all); may be empty.
  std::function<void(size_t, size_t)> progress;
  // Called once with every point's experiment, after all are built and before the first runs; may be empty.
  std::function<void(const std::vector<Experiment>&)> before_run;
};

// One point of a sweep. Modeled times cover the model's MoE layers (model.moe_layers), each costed as the experiment's MoE
// layer with the last routed batch's loads, on the primary placement (expert_parallel when the
// experiment uses it, else single).
struct SweepRow {
  std::vector<std::string> values;  // [axes] the varied values, in axis order
  std::string gating;
  std::string hardware;
  std::string hardware_digest;      // cost/hardware_profile.hpp hardware_digest of that profile
  std::string placement;            // "single" or "expert_parallel"
  int devices = 1;
  int64_t num_tokens = 0;           // tokens per routed batch
  int experts = 1, top_k = 1;       // model.experts, model.top_k (a balanced expert sees N k / E tokens)
  int layers = 1;                   // model.layers
  int moe_layers = 1;               // the MoE layers of model.layers, the factor applied to every modeled time
  double critical_batch = 0;        // weights-only B* of the profile at model.dtype
  CostBreakdown actual, balanced;   // x moe_layers
  Erosion erosion;                  // x moe_layers: where actual.quantized_s goes (cost/placement.hpp)
  double batching_efficiency = 1;   // the balanced counterfactual's time over the routing's (1 or L layers alike)
  double batching_efficiency_exact = 1;  // the same for this exact batch size (no tile-phase mean)
  double balancedness = 1;               // mean / max tokens per device (1 on one device)
  double roofline_efficiency = 1;   // the same on the ideal roofline: reference / (reference + imbalance)
  double time_per_token_s = 0;      // actual.quantized_s / num_tokens (0 when no tokens)
  double compute_bound_experts = 0; // physical experts past their knee (per layer)
  double imbalance = 1, drop_rate = 0;
  bool measured = false;            // the executed columns are filled
  double measured_layer_s = 0;      // one executed layer at the execute: size (not x layers)
  double measured_experts_s = 0;
  double measured_balanced_layer_s = 0;
  double measured_layer_min_s = 0, measured_layer_max_s = 0;  // fastest and slowest repeat
  double measured_balanced_layer_min_s = 0, measured_balanced_layer_max_s = 0;
  MeasuredNoise measured_noise;     // src/pipeline/measured_noise.hpp: when up, the table shows no meas_eff
  // Expert parallel: the plan the point's loads ran on (placement.expert empty otherwise).
  ExpertPlacement plan;
  std::vector<double> device_plan_load;  // [devices]
  double predicted_balancedness = 1, realised_balancedness = 1;
};

// The knee of one curve of a sweep over workload.batch (src/sweep/knee.hpp): the rows that differ only in
// the batch, for the routing and for its balanced counterpart (both on the quantized column).
struct SweepKnee {
  std::vector<std::string> values;     // [axes] the other axes' values; the batch axis's entry is ""
  std::vector<size_t> rows;            // the curve's rows, by growing tokens
  std::optional<int64_t> tokens;         // the routing's knee; nullopt: no bend within the swept batches
  std::optional<int64_t> balanced_tokens;  // the balanced counterpart's
  // Mean imbalance_cost_s / (actual_s - imbalance_total_s) over the curve's rows at or past the routing's knee:
  // what imbalance costs (its tile-phase mean, savings apart) over the balanced time once the batching benefit is
  // spent (nullopt without a knee).
  std::optional<double> imbalance_cost_past;
};

struct SweepResult {
  std::string experiment;           // the experiment's name
  std::string source_file;
  Experiment base;                  // the effective experiment the axes vary
  HardwareProfile hardware;         // its profile (a hardware axis names each row's in SweepRow)
  std::vector<SweepAxis> axes;
  std::vector<SweepRow> rows;       // one per point, in sweep_points order
  std::vector<SweepKnee> knees;     // one per curve when an axis sets workload.batch; empty otherwise
};

// The knees of a sweep's curves (rows grouped by every axis but the one that sets workload.batch).
std::vector<SweepKnee> sweep_knees(const SweepResult& sweep);

// Builds the experiment of every point (base plus the point's overrides through apply_override, so each
// is validated: a bad key or value throws ConfigError before anything runs), then runs them in order.
SweepResult run_sweep(const Experiment& base, const std::vector<SweepAxis>& axes, const SweepOptions& opts);
}  // namespace moesim
