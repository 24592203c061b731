// Published serving measurements against `moesim serve` (docs/serve.md "Validation"): reads the serving tables of
// data/serving (the header kServeHeader; its README.md has the sources), runs each configuration's request stream
// through the scheduler and the step model, and reports the error per row and per table. The serving run has no
// figures of its own (the step model's are fitted on the step tables), so the held-out column equals the model's:
// every serving row is held out. Also the one place a serving run's input is made from an experiment and the
// run's settings (moesim serve and the validation share it). Host only.
// Covered by tests/sweep/published_serve_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/serve/serve_memory.hpp"
#include "src/serve/serve_run.hpp"
#include "src/sweep/published.hpp"
#include "src/sweep/published_step.hpp"

namespace moesim {

// How a serving run is set up beyond the experiment.
struct ServeSetup {
  int attention_tp = 1;                 // attention DP = the expert-parallel GPUs / attention_tp
  std::string attention_tp_from = "--tp";  // where attention_tp came from, as an error names it
  std::string routing = "model";        // model, balanced or power_law:ALPHA
  std::string weight_dtype;             // "" (the model's), bf16, fp16, fp8, int4, mxfp4, nvfp4 (costed as fp8)
  double kv_bytes = 2;                  // a KV value's bytes (bf16 2, fp8 1)
  double mem_fraction = 0.9;
  SchedulerLimits limits;               // max_batch, max_num_tokens, concurrency, balance (ranks and KV are set here)
  // Disaggregated serving: the prefill and the decode GPUs, each group expert-parallel over itself (the experiment's
  // placement.devices unread); 0 and 0: colocated on placement.devices.
  int prefill_gpus = 0, decode_gpus = 0;
  // EPLB over time: re-plan every this many steps (0: the plan made once, compared alike; -1: off), the routing a
  // sequence of `draws` routed batches (a recorded workload: its own), each holding `drift_steps` steps.
  int64_t rebalance_every = -1, drift_steps = 50;
  int draws = 16;
  int mtp_draft = 0;         // draft tokens a decoding request verifies each step
  double mtp_accept = 0;     // each accepted with this chance, given the ones before it
};

struct ServeModelInput {
  ServeInput input;
  KvCapacity kv;  // the decode GPUs' (colocated: every GPU's)
  int gpus = 1;   // every GPU of the deployment
};

// The step model's template (a decode row at the largest step, max_num_tokens a rank, routed once at that size and
// scaled to each step's tokens), the KV capacity from memory, and the limits. Throws ConfigError or InputError
// naming the setting.
// `routed`: loads of the same routing at any size (a search routes once for every layout); null: routes here.
ServeModelInput serve_input_for(const Experiment& e, const HardwareProfile& hw, const ServeSetup& s,
                                std::vector<Request> requests, const StepRouting* routed = nullptr);

extern const char* const kServeHeader;
bool is_serve_table(const std::string& text);

enum class ServeQuantity {
  output_tokens_per_s_per_gpu, total_tokens_per_s_per_gpu, tokens_per_s_per_user, output_tokens_per_s, ttft_ms,
  tpot_ms
};
const char* to_string(ServeQuantity q);

struct ServeRow {
  std::string system, model, weight_dtype, kv_dtype, gpu;
  int gpus = 1, tp = 1, attention_dp = 1, ep = 1, mtp_draft = 0;
  double mtp_accept = 0;
  int64_t max_batch_size = 0, max_num_tokens = 0, concurrency = 0, requests = 0, isl = 0, osl = 0;
  RequestBalance scheduler = RequestBalance::round_robin;
  bool disaggregated = false;
  int prefill_gpus = 0, decode_gpus = 0;
  ServeQuantity quantity = ServeQuantity::output_tokens_per_s_per_gpu;
  double measured = 0;
  std::string unit, source, notes;
  int line = 0;
  std::string table;  // the source: the leave-one-table-out unit
};

struct ServeTable {
  std::string name, origin;
  std::vector<ServeRow> rows;
};

// The engine defaults an empty cell takes (docs/serve.md): TensorRT-LLM's build defaults, max_batch_size 2048 and
// max_num_tokens 8192, for every system; requests 16 x concurrency (the TensorRT-LLM recipe's).
constexpr int64_t kServeDefaultMaxBatch = 2048, kServeDefaultMaxNumTokens = 8192, kServeRequestsPerClient = 16;
// A closed loop of fixed lengths repeats itself every `concurrency` requests: at most this many waves are run.
constexpr int64_t kServeWaves = 2;

// Parses one serving CSV. Errors: InputError "ORIGIN:LINE: COLUMN: expected WHAT, got 'VALUE'".
ServeTable parse_serve_csv(const std::string& text, const std::string& origin);
// The serving tables among `spec`'s files ("all": the built-in ones; a folder; one CSV), sorted by name.
std::vector<ServeTable> load_serve_tables(const std::string& spec);

struct ServeResultRow {
  ServeRow row;
  double model = 0;           // 0 when not modeled (see not_modeled)
  std::string approximation;  // what the model could not take as the row states it
  std::string not_modeled;    // why the row was not modeled (disaggregated serving), empty when it was
  double error() const { return model / row.measured - 1.0; }
};

struct ServeValidation {
  std::vector<ServeResultRow> rows;
  std::vector<std::string> tables;
  ErrorSummary model;  // every modeled row
};

ServeValidation validate_serving(const std::vector<ServeTable>& tables);

}  // namespace moesim
