// The report of a validation run (src/sweep/validate.hpp) and of the published tables
// (src/sweep/published.hpp): table, CSV or JSON. Host only. Covered by
// tests/sweep/validate_test.cpp.
#pragma once

#include <string>

#include "src/report/report.hpp"
#include "src/sweep/published.hpp"
#include "src/sweep/published_comm.hpp"
#include "src/sweep/validate.hpp"

namespace moesim {

// table (with the error summary and a note when the weights fit in the cache), csv or json; markdown is
// an InputError.
std::string format_validation(const ValidateResult& r, ReportFormat format);

// `validate --published`: per table its points (measured, each modeled column and its error), the
// median and worst error per column, then the summary over tables and overall; csv (one row per point);
// json (schema_version, provenance, tables with fits and points, overall). `kernels` and `comm` are the
// kernel and the communication tables' validations, either of them null when the spec has none: the table
// format prints the kernel section and then the communication one; csv the kernel rows, then (after one
// blank line) the communication rows with their own header; json adds "communication" beside the kernel keys.
std::string format_published(const PublishedValidation* kernels, const CommValidation* comm, ReportFormat format);

}  // namespace moesim
