// Model validation (`moesim validate`): runs the executed pipeline over a batch sweep on the CPU
// backend and models the same routed loads at the executed size (execute.hidden/ffn, fp32) on a host
// profile (cpu-local), comparing the predicted expert-GEMM time (the kernel model, as run prints it) with the
// measured expert phase per point, with the median and mean absolute percentage errors.
// Measured times are wall-clock medians; everything else is deterministic. Host only.
// Covered by tests/sweep/validate_test.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/pipeline/run_experiment.hpp"

namespace moesim {

struct ValidatePoint {
  int64_t num_tokens = 0;
  int active_experts = 0;          // routed experts with rows (shared experts not counted)
  int64_t rows = 0;                // rows through the routed experts' GEMMs (padding included)
  double predicted_s = 0;          // modeled expert time: the kernel model (LayerCost actual.quantized_s)
  bool compute_bound = false;      // the modeled compute term exceeds the memory term
  double measured_s = 0;           // measured expert phase (grouped SwiGLU + shared experts), median
  double error = 0;                // (predicted - measured) / measured
};

struct ValidateResult {
  std::string experiment, source_file, hardware;
  std::string hardware_digest;     // cost/hardware_profile.hpp hardware_digest
  Experiment base;                 // the effective experiment, its hardware the profile validated
  int64_t hidden = 0, ffn = 0;     // the executed (and modeled) expert size
  int experts = 0, top_k = 0, shared_experts = 0, repeats = 0;
  std::string gating;
  double weight_bytes = 0;         // fp32 weights of every expert, routed and shared
  double llc_bytes = 0;            // the profile's l2 (last-level cache on a CPU profile); 0 = unknown
  std::vector<ValidatePoint> points;
  double median_ape = 0, mean_ape = 0;  // over the points, as fractions
  // 1-minute load average (/proc/loadavg) before and after the runs, and the cores online: other
  // processes sharing the cores stretch measured times, so the report shows them. -1 = unknown.
  double load_before = -1, load_after = -1;
  int cores_online = 0;
};

// Runs `base` at workload.batch = each of `batch_values` (through apply_override) with execution on,
// its model section set to the executed size (model.hidden/ffn = execute.hidden/ffn, fp32) on
// `hardware` (a name, file or inline table), one device. `progress` (may be empty) is called with
// (points done, points in all).
ValidateResult run_validation(const Experiment& base, const HardwareRef& hardware,
                              const std::vector<std::string>& batch_values, const RunOptions& run_opts,
                              const std::function<void(size_t, size_t)>& progress = {});
}  // namespace moesim
