// The wall clock every moesim timing reads: std::chrono::steady_clock, and the seconds elapsed since a
// time point as a double. Host only. Covered by tests/common/median_test.cpp (with median.hpp).
#pragma once

#include <chrono>

namespace moesim {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace moesim
