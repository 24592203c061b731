// Private to src/report: the step-record helpers the JSON (report.cpp) and the tables (report_table.cpp)
// share. Host only.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "src/pipeline/results.hpp"

namespace moesim::report_detail {

std::vector<size_t> phase_indices(const VariantResult& v, const std::string& phase);

// Loads summed over every step of each layer, with their balance: comparable with per-layer counts
// recorded from real models over many tokens (docs/workloads.md, calibration).
std::vector<std::pair<int, BalanceMetrics>> per_layer_totals(const RunResult& run, const VariantResult& v);

}  // namespace moesim::report_detail
