// The report of `moesim route`: a user's logits file routed once, with the balance metrics of the
// routing, as JSON (schema_version) or a text listing. Host only. Covered by tests/cli/cli_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/report/report.hpp"
#include "router/balance_metrics.hpp"

namespace moesim {

struct RouteReport {
  std::string file;                 // the logits file
  int64_t num_tokens = 0;
  int num_experts = 0, top_k = 0;
  std::string gating;
  double capacity_factor = 0;
  double memory_estimate_bytes = 0, memory_limit_bytes = 0;
  BalanceMetrics metrics;
  std::vector<float> expert_bias;   // aux_free_bias: the bias after the one update this routing made
  Experiment experiment;            // the effective experiment the logits were routed under
  std::string hardware_digest;      // its profile's (nothing is modeled; recorded for the baseline identity)
};

// json: the fields above, `metrics` (metrics_to_json) and, for aux_free_bias, `expert_bias` and
// `expert_bias_updates` (one entry, batch 0, layer 0, as run writes them); table, csv and markdown: a text listing, one
// metric per line.
std::string format_route(const RouteReport& r, ReportFormat format);

}  // namespace moesim
