// Reports of a run: JSON (stable schema, `schema_version`), an aligned table with units in the
// headers, CSV and Markdown, one row per router variant; and the named scalar metrics that `check`
// and the tables read (metric_value). Host only. Covered by tests/report/report_test.cpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/pipeline/results.hpp"

namespace moesim {

// The version of every JSON result's layout (docs/json-schema.md). Fields are added without a bump; a
// field renamed, removed or given another meaning bumps it.
constexpr int kReportSchemaVersion = 2;

enum class ReportFormat { table, json, csv, markdown };
ReportFormat parse_report_format(const std::string& s);  // throws InputError

// The names of every scalar metric a report carries (the `expect:` vocabulary).
const std::vector<std::string>& scalar_metric_names();

// The value of a scalar metric of one variant; aggregate "value" is the last batch, "mean", "p50",
// "p95", "max" aggregate over the batches/layers/steps. Empty when the metric does not apply.
std::optional<double> metric_value(const RunResult& run, const VariantResult& v, const std::string& metric,
                                   const std::string& aggregate);

// The three columns of a modeled time as JSON: ideal_s, quantized_s, calibrated_s.
nlohmann::json cost_json(const CostBreakdown& c);

// 1-based rank of each variant by the primary placement's modeled layer time divided by the kept
// fraction (1 - drop_rate), so that dropping work does not rank as speed (ties: lower imbalance).
std::vector<int> rank_variants(const RunResult& run);

// One batch's metrics as JSON: every scalar of the metric vocabulary (null where it does not
// apply), plus the load, demand and utilization arrays.
nlohmann::json metrics_to_json(const BalanceMetrics& m);

// A result's `experiment` block: {"name", "source", "config"}, config being the effective experiment as
// `moesim config` prints it (config/load_config.hpp experiment_to_json), with workload.path the
// absolute path of `file_read` when the run read a file.
nlohmann::json experiment_json(const Experiment& e, const std::string& file_read);

nlohmann::json run_to_json(const RunResult& run);
std::string format_run(const RunResult& run, ReportFormat format);

}  // namespace moesim
