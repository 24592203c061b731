// `check`: the regression gate on balance metrics. Evaluates an experiment's `expect:` bounds against
// a run, and compares a run against a baseline (the JSON that run/compare write) with a tolerance,
// flagging only moves in the bad direction of each metric. Host only.
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

// +1 when larger is better (entropy_norm, batching_efficiency, ...), -1 when smaller is better,
// 0 when the metric is not gated against a baseline (capacity, critical_batch, and measured times,
// which depend on the machine's load; `expect:` may still bound them).
int metric_direction(const std::string& metric);

// The router variants a check of `e` must run: its own gating plus every strategy its expect block
// or the baseline names (labels "gating key=value ..." are rebuilt as router overrides).
std::vector<RouterVariant> check_variants(const Experiment& e, const std::vector<std::string>& baseline_labels);

// Bounds of the experiment's expect: block against the run.
std::vector<CheckFailure> check_expectations(const RunResult& run);

// The run against one baseline run JSON: every gated scalar metric of every strategy present in both.
std::vector<CheckFailure> check_against_baseline(const RunResult& run, const nlohmann::json& baseline_run,
                                                 double rtol, double atol);

// Strategy labels in a baseline run JSON; throws InputError (naming `name`) when it is not one.
std::vector<std::string> baseline_labels(const nlohmann::json& baseline_run, const std::string& name);

// Baseline runs by experiment name from the text of a baseline file: one run JSON, or
// {"schema_version", "runs": [...]}. Every run is validated as baseline_labels does and must carry
// experiment.name; throws InputError (one line naming `name`) otherwise. Fuzzed by tests/fuzz.
std::map<std::string, nlohmann::json> parse_baselines(const std::string& text, const std::string& name);

}  // namespace moesim
