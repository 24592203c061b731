// A self-contained HTML page of a run report (the JSON that run/compare write): a metrics table,
// per-expert load bars per strategy, batching efficiency per strategy, and the per-batch imbalance
// series where a run has several batches. Inline SVG only: no scripts, no network.
// Host only. Covered by tests/report/report_html_test.cpp (structure, and headless Chromium).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace moesim {

// `run` is a run JSON (schema_version 2); throws InputError naming `source_name` when it is not one.
std::string render_html_report(const nlohmann::json& run, const std::string& source_name);

}  // namespace moesim
