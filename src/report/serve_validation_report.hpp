// The serving tables' part of `moesim validate --published` (src/sweep/published_serve.hpp): every row (measured,
// moesim serve's figure and the error; every row is held out, since the serving run fits nothing of its own), and
// the median error over the modeled rows. Table and Markdown text, CSV rows, JSON (docs/json-schema.md
// "validate --published", `serving`). Host only. Covered by tests/sweep/published_serve_test.cpp.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "src/report/report.hpp"
#include "src/sweep/published_serve.hpp"

namespace moesim {

std::string format_serve_validation(const ServeValidation& v, ReportFormat format);
nlohmann::json serve_validation_json(const ServeValidation& v);

}  // namespace moesim
