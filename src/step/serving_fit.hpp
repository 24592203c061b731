// The serving step's fitted figures (src/step/serving_step.hpp StepFigures), written by
// `moesim validate --published --fit-step` from the step tables (data/serving-step/step-measurements.csv;
// docs/serving.md "Validation"): least squares in log time over the tables' layer times and component times,
// each table weighted equally, by coordinate descent over the three figures.
#pragma once

namespace moesim {

struct ServingFit {
  static constexpr double other_kernels = 32.58;
  static constexpr double attention_efficiency = 0.574;
  static constexpr double decode_launch_share = 0.370;
};

}  // namespace moesim
