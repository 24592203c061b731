// The serving step's fitted figures (src/step/serving_step.hpp StepFigures), copied from the refit that
// `moesim validate --published data/serving-step` prints last ("refitted on every table"; docs/serving.md
// "Validation"): least squares in log time over the step tables' layer times and component times, each table weighted
// equally, by coordinate descent over the three figures. PublishedStep.ShippedTablesAndTheirFit fails when they drift.
#pragma once

namespace moesim {

struct ServingFit {
  static constexpr double other_kernels = 32.53;
  static constexpr double attention_efficiency = 0.572;
  static constexpr double decode_launch_share = 0.337;
};

}  // namespace moesim
