// The training tables' part of `moesim validate --published` (src/sweep/published_train.hpp): per table its rows
// (measured, the model with the shipped figures, the held-out column and their errors), the median and worst
// error per table and overall, the forced-balance rows' summary, the fitted figures and the forced-balance /
// real-router pairs. Table and Markdown text, CSV rows, JSON (docs/json-schema.md "validate --published",
// `training`). Host only. Covered by tests/sweep/published_train_test.cpp.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "src/report/report.hpp"
#include "src/sweep/published_train.hpp"

namespace moesim {

std::string format_training_validation(const TrainingValidation& v, ReportFormat format);
nlohmann::json training_validation_json(const TrainingValidation& v);

}  // namespace moesim
