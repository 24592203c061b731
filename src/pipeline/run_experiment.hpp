// Runs one experiment for one or more router variants: workload (synthetic, logits, decoder, trace,
// load_profile) -> router -> dispatch -> experts -> combine at the `execute:` size on the CPU, balance
// metrics per batch (decoder, trace, profile: per step and layer, with phase totals), and the cost model
// at the model's real size per placement. Every variant sees the same inputs (same seed); deterministic
// apart from the measured times. Host only. Covered by tests/decoder/decoder_test.cpp,
// tests/workload/*_test.cpp and the CLI tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/pipeline/results.hpp"
#include "router/routing.hpp"

namespace moesim {

// One routed batch as it happened, for RunOptions::routing_sink (`run --dump-routing`). Pointers live for
// the call only.
struct RoutedBatch {
  int64_t step = 0;                     // batch index (synthetic, logits), decoder step, or the trace's step
  int layer = 0;                        // 0 for synthetic and logits batches
  std::string phase;                    // "prefill", "decode", or "" (batches, traces without one)
  const Routing* routing = nullptr;
  const float* logits = nullptr;        // [num_tokens, num_experts] the router's input; null: none
  const int64_t* token_ids = nullptr;   // [num_tokens] vocabulary ids; null: none
};

struct RunOptions {
  bool execute = true;        // run the executed pipeline (also needs execute.enabled)
  bool verify = false;        // run the serial references beside the fast path and compare
  double memory_limit_bytes = 0;  // 0: no limit
  // Step runs (decoder, trace, load_profile): keep every (step, layer) record with its full modeled cost and
  // per-expert vectors, and list them in the reports. Off (the default): a step run keeps them for its last
  // record only (results.hpp, StepRecord), and the estimate leaves the records' report out. The CLI's
  // `--records` spools them instead (record_sink).
  bool records = false;
  // Step runs: called with every record as it is made, variant by variant (`variant`: its index in the
  // variants) and in record order, with its full modeled cost and per-expert vectors, and the decoder's
  // figures (null for traces and load profiles); may be empty. `--records` spools each record into the json
  // report through it (src/report/record_spool.hpp) instead of keeping it.
  std::function<void(size_t variant, const StepRecord&, const BalanceMetrics&, const DecoderStepFigures*)> record_sink;
  ExecBackend backend = ExecBackend::cpu;  // --backend
  std::function<void(size_t done, size_t total)> progress;  // after each variant; may be empty
  // Called with every routing of the first variant, in execution order (batches; decoder steps then
  // layers; trace batches), before the next batch is routed; may be empty. Load profiles have none.
  std::function<void(const RoutedBatch&)> routing_sink;
};

// Bytes the executed pipeline allocates for this experiment (logits, token ids, hidden states,
// expert weights, gathered rows, outputs; for the decoder its weights, KV cache and activations),
// estimated before any allocation. Trace and load_profile runs: the parsed file, one result per batch
// (a batch per line at most), and with `records` the report's record list (tree and text).
double estimate_run_bytes(const Experiment& e, bool records = true, size_t num_variants = 1);

// Throws ResourceError when the estimate exceeds opts.memory_limit_bytes (before allocating).
// The decoder workload always executes its layers (its hidden states are the workload); opts.execute
// and execute.enabled then only decide whether the last MoE layer is re-timed against balanced routing.
// Trace and load_profile runs are not executed (measured metrics are absent).
RunResult run_experiment(const Experiment& e, const std::vector<RouterVariant>& variants, const RunOptions& opts);

// One MoE layer's modeled cost for given per-expert loads: `load` [model.experts] kept assignments of a batch of
// `num_tokens` tokens (their N k less what `load` holds is undelivered work), dropless, on every placement of `e`
// (one device, and the expert-parallel one when placement.kind says so) with e's model, router and hardware
// profile. The same cost every run models for a batch's loads (the Python module's moesim.cost()).
std::vector<ModeledPlacement> model_loads(const Experiment& e, const std::vector<int64_t>& load, int64_t num_tokens);

// workload.path as given when it exists, else relative to the experiment file's folder (so a config
// can name data beside it wherever moesim runs from); as given when neither exists.
std::string resolve_workload_path(const Experiment& e);


}  // namespace moesim
