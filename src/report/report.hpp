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
constexpr int kReportSchemaVersion = 3;

enum class ReportFormat { table, json, csv, markdown };
ReportFormat parse_report_format(const std::string& s);  // throws InputError

// The names of every scalar metric a report carries (the `expect:` vocabulary).
const std::vector<std::string>& scalar_metric_names();

// The value of a scalar metric of one variant under an aggregate (docs/design.md, "One number per
// metric: the headline value"). "value" is the headline that every report shows, rank orders and check reads by default:
// a batch run's (synthetic, logits) last batch, whose routing the modeled and executed layer use; a
// step run's (decoder, trace, load profile) aggregate over its records: the token-weighted mean
// (weight = record num_tokens) of rates and ratios, the sum of dropped, tokens_unrouted and
// padding_waste, and for modeled_time_s, batching_efficiency and rank_imbalance the mean modeled MoE
// layer over the decode records (all records without a decode phase), VariantResult::modeled. One
// record's aggregate is that record. "last" is the last batch or record, its own modeled cost
// included; "mean" (unweighted), "p50", "p95", "max" run over the batches/records. Empty when the
// metric does not apply (the losses without logits, rank_imbalance on one device, measured without
// execution) or the aggregate is not one of these.
std::optional<double> metric_value(const RunResult& run, const VariantResult& v, const std::string& metric,
                                   const std::string& aggregate);

// The two columns of a modeled time as JSON: ideal_s, quantized_s (the kernel model).
nlohmann::json cost_json(const CostBreakdown& c);

// A modeled layer's erosion block (docs/design.md "erosion"): reference_s, actual_s, parts {imbalance_s,
// quantization_s, padding_s, communication_s}, dropped_work_s and the assignment counts behind the ranking.
nlohmann::json erosion_json(const Erosion& x);
// An expert-parallel placement's all-to-all (docs/json-schema.md "all_to_all"): the kernel, dispatch and
// combine with their busiest device and its bytes, the bytes moved, and the communication as run and exposed.
nlohmann::json all_to_all_json(const A2aCost& a, double exposed_s, double as_run_s);
// An expert-parallel plan (docs/json-schema.md `plan`): per physical slot its logical expert, device, node
// and planned load; replicas per expert; the planned load per device [devices]; the predicted (planned)
// against the realised balancedness; the colocated replicas.
nlohmann::json plan_json(const ExpertPlacement& p, const std::vector<double>& device_load, double predicted,
                         double realised);

// 1-based rank of each variant by the primary placement's modeled time per served assignment
// (Erosion::time_per_served_s: N k minus the dropped assignments and the unrouted tokens' k), so that
// dropping work or leaving tokens unrouted does not rank as speed; ties go to the lower imbalance.
// Headline values throughout. Variants whose time per served assignment and imbalance are both equal
// (within a relative 1e-12) share a rank, and the next rank skips: 1, 1, 3.
std::vector<int> rank_variants(const RunResult& run);

// One batch's metrics as JSON: every scalar of the metric vocabulary (null where it does not
// apply), plus the load, demand and utilization arrays.
nlohmann::json metrics_to_json(const BalanceMetrics& m);

// A result's `experiment` block: {"name", "source", "config"}, config being the effective experiment as
// `moesim config` prints it (config/load_config.hpp experiment_to_json), with workload.path the
// absolute path of `file_read` when the run read a file.
nlohmann::json experiment_json(const Experiment& e, const std::string& file_read);

// The files a result was computed from (docs/json-schema.md `inputs`): one {"key", "path", "digest"} per file,
// key the experiment key that names it (model.hf_config, workload.path: `file_read`, hardware: a profile
// YAML file), path relative to the experiment file's folder (the current folder for the built-in or an
// experiment without a file), digest of its bytes (common/digest.hpp file_digest). check compares a baseline
// by these digests, so a baseline moves with its experiment to another folder or machine.
nlohmann::json input_files_json(const Experiment& e, const std::string& file_read);

// One step record as the json report lists it (strategies[].records[], docs/json-schema.md): phase, step,
// layer, num_tokens, its metrics, the decoder's figures when `d` is given, and its modeled cost.
nlohmann::json record_to_json(const StepRecord& s, const BalanceMetrics& m, const DecoderStepFigures* d);

// The `modeled` block of a strategy in the json report: one object per placement ("single", "expert_parallel")
// with its times, erosion, and under expert parallelism its all-to-all and plan (docs/json-schema.md).
nlohmann::json modeled_json(const std::vector<ModeledPlacement>& placements);

nlohmann::json run_to_json(const RunResult& run);
// The run as `format`. The table and Markdown open with one line a strategy saying what imbalance costs
// (report/verdict.hpp), then the title, the table and a short paragraph on the columns shown; `explain` adds
// every column's definition, the strategies, the placement and the noise. The table keeps to 120 columns
// (text::kTerminalWidth: the columns it leaves out are named under it) unless `wide`; rows that drop
// assignments or leave tokens unrouted are marked "*". CSV has every column of every run under the same names,
// empty where a value does not apply; Markdown every column that applies.
std::string format_run(const RunResult& run, ReportFormat format, bool wide = false, bool explain = false);

}  // namespace moesim
