// `check`: the regression gate on balance metrics. Evaluates an experiment's `expect:` bounds against
// a run, and compares a run against a baseline (the JSON that run/compare/check write) of the same
// effective experiment, on a focused set of routing-dependent metrics, flagging only moves in the bad
// direction of each metric (docs/gate-your-ci.md). Host only.
// Covered by tests/report/check_test.cpp and the regression suite in configs/regression/.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/pipeline/results.hpp"

namespace moesim {

struct CheckFailure {
  std::string file, strategy, metric;
  double value = 0;
  std::string bound;  // e.g. "max 1.3" or "baseline 1.21 (rtol 0.05, atol 0)"
  std::string line() const;  // "FILE: STRATEGY: METRIC = VALUE, expected BOUND"
};

// One metric a check compared: this run's value against an expect: bound or the baseline's value.
struct CheckedMetric {
  std::string metric;     // METRIC, or METRIC.AGG for an aggregate other than value
  double value = 0;       // this run's; NaN when the run has none
  double baseline = 0;    // the baseline's; NaN for an expect: bound, or when the baseline has none
  std::string bound;      // what was expected: "max 1.3", "at most baseline 1.21 (rtol 1e-06, atol 1e-12)"
  bool passed = true;
};

// What a check compared for one strategy of one file: the run's strategy and the digest of its effective
// experiment, and against it either its expect: bounds (baseline empty) or a strategy of the baseline, with the
// digest of the experiment the baseline was recorded from. Every check report names these.
struct CheckComparison {
  std::string file, strategy, config_digest;
  std::string baseline, baseline_strategy, baseline_config_digest;  // empty for expect: bounds
  std::vector<CheckedMetric> metrics;
};

// The failing metrics of `comparisons`, in their order, as FAIL lines name them.
std::vector<CheckFailure> failures_of(const std::vector<CheckComparison>& comparisons);

// The digest of a run JSON's effective experiment over what a baseline comparison reads, as
// experiment_difference reads it: experiment.config but the keys it skips, a file an experiment key names by
// its contents (inputs[].digest, workload.file_digest), the hardware profile by its values (hardware.digest);
// so that two runs a check takes for the same experiment have the same digest, in any folder
// ("fnv1a64:..."; common/digest.hpp). "" when the run has no experiment.config object.
std::string config_digest(const nlohmann::json& run);

// Which of a baseline's strategies each strategy of this run is compared with (run label, baseline label).
// A strategy is compared with the baseline's strategy of the same label, but where the experiment's own gating
// changed (check --allow-change router.gating): the baseline's rows of its own gating that have no row of the
// new gating beside them were the file's own strategy, and are compared with the file's new strategy (the
// same label with the gating replaced), which is what runs; the old strategy is not run in its place.
struct StrategyPair {
  std::string run_label, baseline_label;
};
std::vector<StrategyPair> baseline_pairs(const Experiment& e, const nlohmann::json& baseline_run);

// Baseline tolerances by default: above the rounding noise of a float metric printed to 17 digits and
// recomputed by another compiler or BLAS kernel, far below any change a router or workload makes.
constexpr double kBaselineRtol = 1e-6;
constexpr double kBaselineAtol = 1e-12;

// The metrics a baseline comparison reads when neither --metrics nor an expect: block names any:
// imbalance, drop_rate, tokens_unrouted, cv, entropy_norm, batching_efficiency, modeled_time_s. Every
// one moves with the routing; z_loss (the logits only) and critical_batch (the hardware only) do not.
const std::vector<std::string>& default_baseline_metrics();

// The metrics to compare against a baseline: `requested` (--metrics) when given, each checked against
// the vocabulary (measured ones refused: they depend on the machine's load); else the metrics e's
// expect: block names, measured ones left out; else the default set. Throws InputError.
std::vector<std::string> baseline_metrics(const Experiment& e, const std::vector<std::string>& requested);

// The executed pipeline's metrics (measured_layer_s, measured_batching_efficiency): they need --execute
// and depend on the machine's load.
bool is_measured(const std::string& metric);

// Counts (dropped, tokens_unrouted, padding_waste, active_experts, dead_experts, capacity): compared
// exactly against a baseline, whatever the tolerance.
bool is_count_metric(const std::string& metric);

// Where a baseline's experiment differs from a run's: the first differing key of experiment.config in
// key order, with both values as JSON text. Keys that cannot move a gated metric are skipped (name,
// expect, execute.enabled, execute.repeats); a file an experiment key names (model.hf_config, the
// workload's file, a hardware profile YAML: the `inputs` block) is compared by its bytes' digest, not its
// path, so a baseline moves with its experiment; a hardware profile also by its values (hardware.digest).
struct ExperimentDifference {
  std::string key, baseline_value, run_value;
};
// `run` needs experiment.config, inputs, hardware.digest and workload.file_digest (when a file was read), as
// run_to_json writes them. A key in `allowed`, or under one (a section), is skipped.
std::optional<ExperimentDifference> experiment_difference(const nlohmann::json& baseline_run,
                                                          const nlohmann::json& run,
                                                          const std::vector<std::string>& allowed);

// Whether `key` ("workload", "workload.skew") names a section or key of a config tree.
bool names_config_key(const nlohmann::json& config, const std::string& key);

// +1 when larger is better (entropy_norm, batching_efficiency, ...), -1 when smaller is better,
// 0 when the metric is not gated against a baseline (capacity, critical_batch, and measured times,
// which depend on the machine's load; `expect:` may still bound them).
int metric_direction(const std::string& metric);

// The router variants a check of `e` must run: its own gating plus every strategy its expect block
// or the baseline names (labels "gating key=value ..." are rebuilt as router overrides).
std::vector<RouterVariant> check_variants(const Experiment& e, const std::vector<std::string>& baseline_labels);

// Bounds of the experiment's expect: block against the run: failures_of(expectation_comparisons(run, "")).
std::vector<CheckFailure> check_expectations(const RunResult& run);
// Every bound of the experiment's expect: block against the run, one comparison per strategy a bound reads;
// `config_digest` names the run's experiment.
std::vector<CheckComparison> expectation_comparisons(const RunResult& run, const std::string& config_digest);

// The aggregates a baseline comparison may read (check --aggregate): "value" (the headline, the default),
// "last" (the last batch or record), "mean", "p50", "p95", "max" (over the batches or records).
const std::vector<std::string>& baseline_aggregates();

// The run against one baseline run JSON: `metrics` of every strategy present in both, under `aggregate`
// (baseline_aggregates(): the run's metric_value against the baseline's metrics, last_record_metrics or
// aggregates.METRIC.AGG; a baseline of one batch or record, or a run-level metric, has one value for every
// aggregate, its metrics). Counts compare exactly, other metrics within atol + rtol |baseline|; a metric
// with a good direction fails only when it moves the bad way, one without (capacity, critical_batch) when
// it moves either way. A failure names the metric as METRIC.AGG for an aggregate other than value.
// check_against_baseline is failures_of(baseline_comparisons(...)) with every strategy paired by its label.
std::vector<CheckFailure> check_against_baseline(const RunResult& run, const nlohmann::json& baseline_run,
                                                 const std::vector<std::string>& metrics, double rtol,
                                                 double atol, const std::string& aggregate = "value");
// The same for the `pairs` given (baseline_pairs), one comparison per pair whose strategies are in the run and
// the baseline, in the baseline's order; `baseline_name` and the digests name what was compared. A bound
// against another strategy of the baseline than the run's says which.
std::vector<CheckComparison> baseline_comparisons(const RunResult& run, const std::string& config_digest,
                                                  const nlohmann::json& baseline_run, const std::string& baseline_name,
                                                  const std::vector<StrategyPair>& pairs,
                                                  const std::vector<std::string>& metrics, double rtol, double atol,
                                                  const std::string& aggregate = "value");

// Strategy labels in a run JSON; throws InputError (naming `name`) when it is not one: another
// schema_version, a shape that is not a run's (schema_version, experiment.config, strategies[]).
std::vector<std::string> run_result_labels(const nlohmann::json& run, const std::string& name);

// The same for a baseline, which must also come from run, compare or check (provenance.command; not
// sweep, validate, route).
std::vector<std::string> baseline_labels(const nlohmann::json& baseline_run, const std::string& name);

// Baseline runs by experiment name from the text of a baseline file: one run JSON, or
// {"schema_version", "runs": [...]}. Every run is validated as baseline_labels does and must carry
// experiment.name; throws InputError (one line naming `name`) otherwise. Fuzzed by tests/fuzz.
std::map<std::string, nlohmann::json> parse_baselines(const std::string& text, const std::string& name);

}  // namespace moesim
