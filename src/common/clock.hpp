// The wall clock every moesim timing reads: std::chrono::steady_clock, and the seconds elapsed since a
// time point as a double; and the calendar time results record, in UTC. Host only. Covered by
// tests/common/median_test.cpp (with median.hpp) and tests/report/provenance_test.cpp.
#pragma once

#include <chrono>
#include <ctime>
#include <string>

namespace moesim {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The current UTC time formatted by strftime (e.g. "%Y-%m-%dT%H:%M:%SZ").
inline std::string utc_now(const char* strftime_format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char out[64];
  return std::strftime(out, sizeof out, strftime_format, &tm) ? out : "";
}

}  // namespace moesim
