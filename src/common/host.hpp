// The host this process runs on, as results and the noise rule read it: the OpenMP team size a parallel
// region gets now, and the 1-minute load average. Host only. Covered by tests/pipeline/measured_noise_test.cpp
// and tests/report/provenance_test.cpp.
#pragma once

#include <algorithm>
#include <cstdlib>

#if defined(MOESIM_HAS_OPENMP)
#include <omp.h>
#endif

namespace moesim {

// Threads of the next OpenMP parallel region (--threads, or all cores); 1 without OpenMP.
inline int openmp_max_threads() {
#if defined(MOESIM_HAS_OPENMP)
  return std::max(1, omp_get_max_threads());
#else
  return 1;
#endif
}

// The 1-minute load average (getloadavg, /proc/loadavg on Linux); -1 where the system reports none.
inline double load_average_1min() {
  double avg[1];
  return getloadavg(avg, 1) == 1 ? avg[0] : -1.0;
}

}  // namespace moesim
