// Reports of `moesim train` (docs/training.md): one modeled training step, or the comparison of routings side by
// side (--compare), as a table, JSON (docs/json-schema.md "moesim train"), CSV, Markdown or a self-contained HTML
// page (inline SVG: the step's parts and its erosion against forced balance). Host only.
// Covered by tests/report/train_report_test.cpp and tests/cli/train_cli_test.cpp.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/config/experiment.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/report/report.hpp"
#include "src/train/train_step.hpp"

namespace moesim {

// One modeled step of a report: its label ("as configured", "forced balance", "capacity 1.25", ...), the routing
// and capacity it ran with, and the step.
struct TrainVariant {
  std::string label;
  TrainRouting routing;
  double capacity_factor = 0;  // 0: dropless
  Layout layout = Layout::dropless;
  TrainStep step;
};

struct TrainReport {
  const Experiment* experiment = nullptr;
  const HardwareProfile* hardware = nullptr;
  std::string file_read;       // the workload file the run read ("" when none)
  bool compare = false;        // --compare: the variants side by side
  bool wide = false;           // --wide: every column of the comparison's table, past 120 characters
  std::vector<TrainVariant> variants;
};

// The report as text in `format`; the JSON's layout is docs/json-schema.md "moesim train".
std::string format_train(const TrainReport& r, ReportFormat format);
nlohmann::json train_json(const TrainReport& r);
// The HTML page: the summary, a bar per part of the step (busy and exposed), the erosion's parts per variant.
std::string format_train_html(const TrainReport& r);

}  // namespace moesim
