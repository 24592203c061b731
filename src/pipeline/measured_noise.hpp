// Whether measured times are too noisy to compare (docs/design.md, "Measured spread and noise"): the
// decision from its inputs alone (judge_measured_noise: the spread of the actual and the balanced layer
// over the repeats, the repeat count, the host threads against the cores and the load average), and the
// machine's side of those inputs (host_load_at_start, host_threads), read apart from the decision so that
// tests inject them. Host only. Covered by tests/pipeline/measured_noise_test.cpp.
#pragma once

#include <string>

#include "src/pipeline/results.hpp"

namespace moesim {

// Below this many timed repeats a median has no spread to judge it by.
constexpr int kMinQuietRepeats = 3;
// Largest (max - min) / median of a layer time over its repeats that still counts as quiet.
constexpr double kMaxQuietSpread = 0.10;
// Other work may keep this many cores busy (1-minute load average) beside our threads.
constexpr double kLoadSlackCores = 0.5;

// The fastest, median and slowest of one time over the repeats, in seconds.
struct TimeSpread {
  double min_s = 0, median_s = 0, max_s = 0;
};

// (max - min) / median; 0 when the median is not positive.
double relative_spread(const TimeSpread& t);

struct NoiseInputs {
  int repeats = 0;               // timed repeats behind each median
  TimeSpread actual, balanced;   // the executed layer under the variant's routing and under balanced routing
  int threads = 0;               // host threads timing the layer; 0: device-timed (CUDA events), load rules skipped
  int cores = 0;                 // cores this process may run on; 0: unknown, load rules skipped
  double load_average = -1;      // 1-minute load average before moesim's own work; < 0: unknown, rule skipped
};

// Noisy when any rule fires, the reason naming each that did ("; "-separated):
//   repeats < kMinQuietRepeats;
//   relative_spread(actual) or relative_spread(balanced) > kMaxQuietSpread;
//   threads > cores; otherwise load_average + threads > cores + kLoadSlackCores.
MeasuredNoise judge_measured_noise(const NoiseInputs& in);

// The cores this process may run on (its CPU affinity; the hardware's count where that is unknown) and the
// 1-minute load average, read once, at the first call in the process (run_experiment makes it before any
// executed work, so that a sweep's later points do not see the load of its earlier ones). load_average < 0
// where the system does not report one.
struct HostLoad {
  int cores = 0;
  double load_average = -1;
};
const HostLoad& host_load_at_start();

// The OpenMP threads (and so BLAS threads) a timed layer runs on now; 1 without OpenMP.
int host_threads();

}  // namespace moesim
