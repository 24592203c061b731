// The report of a validation run (src/sweep/validate.hpp): table, CSV or JSON. Host only. Covered by
// tests/sweep/validate_test.cpp.
#pragma once

#include <string>

#include "src/report/report.hpp"
#include "src/sweep/validate.hpp"

namespace moesim {

// table (with the error summary and a note when the weights fit in the cache), csv or json; markdown is
// an InputError.
std::string format_validation(const ValidateResult& r, ReportFormat format);

}  // namespace moesim
