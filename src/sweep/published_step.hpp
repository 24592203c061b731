// Published serving-step measurements against the step model (`moesim validate --published`): reads the step
// tables of data/serving-step (the header kStepHeader; its README.md has the sources), models every row's
// configuration with src/step/serving_step.hpp on its GPU's profile and its routing, fits the step's three figures
// (StepFigures) to the tables, and predicts each table from a fit that never saw it (leave one table out). A
// table is one source's one phase (the rows sharing source and phase).
// Deterministic. Host only. Covered by tests/sweep/published_step_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/sweep/published.hpp"
#include "src/common/request_lengths.hpp"
#include "src/step/serving_step.hpp"

namespace moesim {

// The columns of a step table, in order; more columns may follow notes.
extern const char* const kStepHeader;
extern const char* const kBalancednessHeader;
bool is_step_table(const std::string& text);

enum class StepQuantity {
  layer_ms, step_ms, dispatch_ms, combine_ms, experts_ms, attention_ms, dense_ms, sync_ms,
  output_tokens_per_s_per_gpu, input_tokens_per_s_per_gpu, balancedness
};
const char* to_string(StepQuantity q);

// One row: the configuration, the quantity and its measured value.
struct StepRow {
  StepPhase phase = StepPhase::decode;
  std::string model, gpu;
  int gpus = 1, devices_per_node = 8, ep = 1, attention_dp = 1, tp = 1;
  int64_t requests_per_gpu = 0, tokens_per_gpu = 0;  // 0: from the other (decode: requests x (1 + draft))
  int64_t isl = 0, osl = 0, kv_len = 0;
  int mtp_draft = 0;
  double mtp_accept = 0;
  A2aOverlap overlap = A2aOverlap::none;
  A2aKernel a2a_kernel = A2aKernel::normal;
  A2aDtype dispatch_dtype = A2aDtype::model, combine_dtype = A2aDtype::model;
  bool dispatch_nvfp4 = false;  // the cell said nvfp4: costed as fp8 (StepResult::approximation says so)
  std::string weight_dtype;
  int redundant_experts = 0;
  std::string routing;  // balanced, model or power_law:ALPHA
  StepQuantity quantity = StepQuantity::layer_ms;
  double measured = 0;  // in the quantity's unit (ms, tokens/s, or a ratio)
  std::string unit, source, notes;
  int line = 0;
  std::string table;    // source + phase: the leave-one-table-out unit
  bool fitted = true;   // the optional `fitted` column after notes: 0 keeps the row out of every fit
  // The optional `lengths` column after notes: the requests' KV lengths (decode) or prompt lengths (prefill);
  // fixed (empty): kv_len, or isl.
  RequestLengths lengths;
};

struct StepTable {
  std::string name, origin;
  std::vector<StepRow> rows;
};

// Parses one step CSV. Errors: InputError "ORIGIN:LINE: COLUMN: expected WHAT, got 'VALUE'".
StepTable parse_step_csv(const std::string& text, const std::string& origin);
// Parses a balancedness table (data/serving-step/deepseek-v3-balancedness.csv: ep, redundant_experts, metric,
// value, source, notes) as balancedness rows of DeepSeek-V3 decode at 256 tokens a GPU with the config's routing:
// gpu_balancedness is mean / max tokens per GPU; rank_imbalance_max_minus_mean_over_mean, x, is read as 1 / (1 + x).
StepTable parse_balancedness_csv(const std::string& text, const std::string& origin);
// Either reader, by the file's header.
StepTable parse_step_table(const std::string& text, const std::string& origin);
bool is_balancedness_table(const std::string& text);
// The step tables among `spec`'s files ("all": the built-in ones; a folder; one CSV), sorted by name.
std::vector<StepTable> load_step_tables(const std::string& spec);

// One modeled row.
struct StepResult {
  StepRow row;
  double model = 0, held_out = 0;  // the shipped figures; a fit that never saw the row's table
  std::string approximation;       // what the model could not take as the row states it (empty: nothing)
  double error(bool held) const { return (held ? held_out : model) / row.measured - 1.0; }
};

struct StepQuantitySummary {
  StepQuantity quantity = StepQuantity::layer_ms;
  ErrorSummary model, held_out;
};

struct StepValidation {
  std::vector<StepResult> rows;
  std::vector<std::string> tables;      // the leave-one-table-out units, in order of appearance
  StepFigures fit;                      // the shipped figures (ServingFit) the model column uses
  StepFigures refit;                    // fitted over every table now (what ServingFit should hold)
  std::vector<StepFigures> held_out_fits;  // [tables]
  // The rows of fitted tables (a row marked fitted 0 is reported, never summarized: its scope is not the step's).
  std::vector<StepQuantitySummary> quantities;
  ErrorSummary model, held_out;         // every fitted row
  // The headline checks: SGLang prefill's default over perfect balance (tokens/s), measured and
  // modeled (0 when the rows are absent), and TensorRT-LLM's synchronization share of the layer.
  double prefill_balance_ratio_measured = 0, prefill_balance_ratio_model = 0;
  double sync_share_measured = 0, sync_share_model = 0;
};

// The step model's input for one row (routing the row's model once; deterministic): the row's model and GPU
// resolved against the table's origin, or given (moesim step: the experiment and its profile). The row's columns
// set the placement (kind, devices, replicas, all-to-all kernel, dtypes, overlap) over the experiment's.
ServingStepInput step_input(const StepRow& row, const std::string& origin);

// A step's routed loads (route once, cost many): `loads` [draws][experts] of `tokens` tokens, and the loads each
// draw's EPLB plan is made from (empty without redundant experts).
struct StepRouting {
  std::string routing;  // the row's routing it was made for
  int64_t tokens = 0;
  std::vector<std::vector<int64_t>> loads, plan_loads;
};
// Routes a row's loads at `tokens` tokens: balanced, power_law:ALPHA draws, the experiment's router on its
// synthetic workload (at most 65,536 tokens routed a batch, scaled), or a load_profile workload's recorded layers or
// a trace workload's recorded batches (each a draw, scaled). with_plan adds the loads each draw's EPLB plan is made
// from, by placement.plan_from: past, placement.warmup_batches batches routed before (none: equal loads; a recorded
// workload: the draw's own record); oracle, the draw's own loads; profile, placement.plan_profile's loads.
// `draws`: the synthetic workload's batches routed (0: 2); a recorded workload gives its own.
StepRouting route_loads(const StepRow& row, const Experiment& e, int64_t tokens, bool with_plan, int draws = 0);
// Where route_loads's EPLB plans come from, for a report's routing line: "EPLB planned from earlier batches",
// "... from each draw's own record", "... from each draw's own loads (oracle)" or "... from PROFILE".
std::string plan_source_note(const Experiment& e);
// The most sequences and prompt tokens one step models (every GPU's): a step of more is refused, not slowed to a crawl.
constexpr int64_t kMaxStepSequences = int64_t{1} << 22;
constexpr int64_t kMaxStepTokens = int64_t{1} << 28;
// Why a row's step is too large to model ("" when it is not): decode requests or prefill tokens over every GPU.
std::string step_size_error(const StepRow& row);
// The tokens a row's step runs over every GPU.
int64_t step_tokens(const StepRow& row);
// `routed` (the same routing of the same experiment's router and workload, any size) is scaled to the row's tokens
// instead of routing again; null: routes.
ServingStepInput step_input_for(const StepRow& row, const Experiment& e, const HardwareProfile& hw,
                                const StepRouting* routed = nullptr);
// model_serving_step on a row's input; a configuration the model refuses (EPLB's divisibility, the heads over tp)
// is an InputError naming the table's line.
ServingStep model_row(const ServingStepInput& in, const std::string& origin, int line);
// The row's quantity in a modeled step.
double step_quantity(const ServingStep& s, StepQuantity q);

StepValidation validate_steps(const std::vector<StepTable>& tables);

}  // namespace moesim
