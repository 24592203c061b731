// Runs one experiment for one or more router variants: workload -> router -> dispatch -> experts ->
// combine (executed at the `execute:` size on the CPU backend), balance metrics per batch, and the cost
// model on the model's real size for each placement. Every variant sees the same logits, token ids
// and hidden states (same seed). Deterministic apart from the measured times.
// Host only. Covered by tests/pipeline/run_experiment_test.cpp and the CLI tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/experiment.hpp"
#include "cost/hardware_profile.hpp"
#include "cost/placement.hpp"
#include "router/balance_metrics.hpp"

namespace moesim {

// A router configuration to run, with the label that names it in reports.
struct RouterVariant {
  std::string label;     // e.g. "token_choice" or "token_choice capacity_factor=2"
  RouterConfig router;
};

// Wall-clock medians over `execute.repeats` timed repeats after one warm-up, in seconds.
struct MeasuredTimes {
  double router_s = 0, dispatch_s = 0, experts_s = 0, combine_s = 0, layer_s = 0;
};

struct ModeledPlacement {
  std::string placement;  // "single" or "expert_parallel"
  int devices = 1;
  LayerCost cost;
};

struct VariantResult {
  RouterVariant variant;
  std::vector<BalanceMetrics> per_batch;  // one entry per routed batch, in order
  std::vector<float> final_bias;          // aux_free_bias: the bias after the last batch
  std::vector<ModeledPlacement> modeled;  // cost of the last batch's routing, per placement
  bool executed = false;
  MeasuredTimes measured;
  // Measured balanced counterfactual: the same executed layer with `balanced` routing.
  double measured_balanced_layer_s = 0;
  std::string verify_message;             // --verify: "ok" or the first mismatch
  const BalanceMetrics& last() const { return per_batch.back(); }
};

struct RunOptions {
  bool execute = true;        // run the executed pipeline (also needs execute.enabled)
  bool verify = false;        // run the serial references beside the fast path and compare
  double memory_limit_bytes = 0;  // 0: no limit
};

struct RunResult {
  Experiment experiment;
  HardwareProfile hardware;
  int64_t num_tokens = 0;     // tokens per routed batch
  std::vector<VariantResult> variants;
};

// Bytes the executed pipeline allocates for this experiment (logits, token ids, hidden states,
// expert weights, gathered rows, outputs), estimated before any allocation.
double estimate_run_bytes(const Experiment& e);

// Throws ResourceError when the estimate exceeds opts.memory_limit_bytes (before allocating).
RunResult run_experiment(const Experiment& e, const std::vector<RouterVariant>& variants, const RunOptions& opts);

// The experiment's own router as the only variant, labelled by its gating name.
std::vector<RouterVariant> own_variant(const Experiment& e);

}  // namespace moesim
