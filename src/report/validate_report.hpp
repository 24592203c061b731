// The report of a validation run (src/sweep/validate.hpp) and of the published tables
// (src/sweep/published.hpp): table, CSV or JSON. Host only. Covered by
// tests/sweep/validate_test.cpp.
#pragma once

#include <string>

#include "src/report/report.hpp"
#include "src/sweep/published.hpp"
#include "src/sweep/validate.hpp"

namespace moesim {

// table (with the error summary and a note when the weights fit in the cache), csv or json; markdown is
// an InputError.
std::string format_validation(const ValidateResult& r, ReportFormat format);

// `validate --published`: per table its points (measured, each modeled column and its error), the
// median and worst error per column, then the summary over tables and overall; csv (one row per point);
// json (schema_version, provenance, tables with fits and points, overall).
std::string format_published(const PublishedValidation& v, ReportFormat format);

}  // namespace moesim
