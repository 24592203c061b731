// The report of a sweep: an aligned table, CSV or JSON of its rows (src/sweep/run_sweep.hpp).
// Deterministic. Host only. Covered by tests/sweep/run_sweep_test.cpp.
#pragma once

#include <string>

#include "src/report/report.hpp"
#include "src/sweep/run_sweep.hpp"

namespace moesim {

// table (aligned, units in headers), csv (one header line, SI units) or json (schema_version, axes, rows).
// markdown is an InputError.
std::string format_sweep(const SweepResult& sweep, ReportFormat format, bool wide = false);

}  // namespace moesim
