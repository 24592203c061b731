// The serving-step tables' part of `moesim validate --published` (src/sweep/published_step.hpp): every row
// (measured, the model with the shipped step figures, the held-out column and their errors), the median error per
// quantity and overall, the headline checks (SGLang's prefill default over perfect balance, TensorRT-LLM's
// synchronization share) and the fitted figures. Table and Markdown text, CSV rows, JSON (docs/json-schema.md
// "validate --published", `serving_step`). Host only. Covered by tests/sweep/published_step_test.cpp.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "src/report/report.hpp"
#include "src/sweep/published_step.hpp"

namespace moesim {

std::string format_step_validation(const StepValidation& v, ReportFormat format);
nlohmann::json step_validation_json(const StepValidation& v);

}  // namespace moesim
