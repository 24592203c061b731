// One user's logits matrix routed once, as `moesim route` and the Python module's moesim.route() do it:
// the experiment route builds for a matrix of E columns (the built-in experiment's router, dropless, no
// placement, then the command's settings and --set overrides), the routing on the host backend, its
// balance metrics and the report `moesim route` prints. Host only. Covered by tests/cli/cli_test.cpp and
// tests/python/test_moesim.py (the module's numbers against `moesim route --format json`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/report/route_report.hpp"
#include "router/balance_metrics.hpp"
#include "router/route.hpp"
#include "router/routing.hpp"

namespace moesim::cli {

// What `moesim route` takes besides the logits; empty or 0 where the user gave nothing.
struct RouteSettings {
  std::string gating;                   // --gating
  int top_k = 0;                        // --top-k (0: min(2, E))
  std::string capacity_factor;          // --capacity-factor, validated as router.capacity_factor
  bool renormalize = false;             // --renormalize
  bool no_renormalize = false;          // --no-renormalize
  std::vector<std::string> overrides;   // --set KEY=VALUE, in order
};

// The experiment a matrix of `num_experts` columns is routed under. Throws InputError (a bad --top-k, both
// renormalize flags) or ConfigError (a bad key or value). Only the keys the user gave count as set, so that
// the key check judges the user's settings, not route's own.
Experiment route_experiment(const RouteSettings& s, int num_experts);

struct RoutedLogits {
  Routing routing;
  BalanceMetrics metrics;
  std::vector<float> expert_bias;  // aux_free_bias: after the one update
};

// Routes logits [num_tokens, num_experts] (row-major) under `e` on the host backend.
RoutedLogits route_logits(const Experiment& e, const float* logits, int64_t num_tokens, int num_experts);

// The report of a routed matrix; `file` names where the logits came from.
RouteReport route_report(const std::string& file, const Experiment& e, const RoutedLogits& r, int64_t num_tokens,
                         int num_experts, double memory_estimate_bytes, double memory_limit_bytes);

}  // namespace moesim::cli
