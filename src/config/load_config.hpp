// The config stage: YAML text plus `--set KEY.PATH=VALUE` overrides -> a typed, validated Experiment,
// and back to YAML (the effective experiment). Every failure throws ConfigError with one line,
// "FILE:LINE: KEY.PATH: expected WHAT, got VALUE" ("--set KEY=VALUE:" in place of FILE:LINE for overrides).
// Deterministic, host only. Covered by tests/config/load_config_test.cpp.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/config/experiment.hpp"

namespace moesim {

// Reads and validates the experiment in `path`; `overrides` ("KEY.PATH=VALUE") apply in order after the file.
Experiment load_experiment_file(const std::string& path, const std::vector<std::string>& overrides);

// Same for YAML already in memory; `source_name` stands for the file in error messages and source_file.
Experiment load_experiment_text(const std::string& yaml_text, const std::string& source_name,
                                const std::vector<std::string>& overrides);

// The built-in default (the embedded configs/quickstart.yaml), source_file "<built-in>".
Experiment default_experiment(const std::vector<std::string>& overrides);

// Every key of the effective experiment as YAML; loading it back gives an equal Experiment.
std::string experiment_to_yaml(const Experiment& e);

// The same tree as JSON, as results record it (docs/json-schema.md, `experiment.config`): plain YAML
// scalars become booleans, integers or numbers where they read as such, quoted ones stay strings.
nlohmann::json experiment_to_json(const Experiment& e);

// Applies one "KEY.PATH=VALUE" override to an already validated experiment and re-validates it;
// on error `e` is left unchanged and ConfigError is thrown.
void apply_override(Experiment& e, const std::string& key_eq_value);
// Several overrides at once, validated together (a combination that is valid only whole, such as
// placement.devices=32 with placement.replicas=32, is accepted in any order); errors as apply_override.
void apply_overrides(Experiment& e, const std::vector<std::string>& settings);

// The metric names an expect: block may bound (JSON keys of the report).
const std::vector<std::string>& known_expect_metrics();

}  // namespace moesim
