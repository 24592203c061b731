// The noise rule of measured times and the host figures it reads (see measured_noise.hpp). Host only.
// Covered by tests/pipeline/measured_noise_test.cpp.
#include "src/pipeline/measured_noise.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif
#include "src/common/host.hpp"

namespace moesim {
namespace {

// A fraction in percent, whole, or with one decimal where a spread would read as the threshold itself
// ("10.3% > 10%", not "10% > 10%").
std::string percent(double fraction) {
  const double p = 100.0 * fraction;
  char buf[32];
  if (p != 100.0 * kMaxQuietSpread && std::round(p) == std::round(100.0 * kMaxQuietSpread))
    std::snprintf(buf, sizeof buf, "%.1f%%", p);
  else
    std::snprintf(buf, sizeof buf, "%.0f%%", p);
  return buf;
}

std::string count(int n, const char* noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); }

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

int affinity_cores() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
#endif
  return static_cast<int>(std::thread::hardware_concurrency());
}

}  // namespace

double relative_spread(const TimeSpread& t) { return t.median_s > 0 ? (t.max_s - t.min_s) / t.median_s : 0.0; }

MeasuredNoise judge_measured_noise(const NoiseInputs& in) {
  std::vector<std::string> reasons;
  if (in.repeats < kMinQuietRepeats)
    reasons.push_back("execute.repeats " + std::to_string(in.repeats) + " < " + std::to_string(kMinQuietRepeats) +
                      ": a median of " + std::to_string(in.repeats) + " has no spread");
  const std::pair<const char*, const TimeSpread*> layers[] = {{"actual", &in.actual}, {"balanced", &in.balanced}};
  for (const auto& [name, t] : layers) {
    const double s = relative_spread(*t);
    if (s > kMaxQuietSpread)
      reasons.push_back(std::string(name) + " layer spread " + percent(s) + " > " + percent(kMaxQuietSpread));
  }
  if (in.threads > 0 && in.cores > 0) {
    if (in.threads > in.cores) {
      reasons.push_back(count(in.threads, "thread") + " > " + count(in.cores, "core"));
    } else if (in.load_average >= 0 && in.load_average + in.threads > in.cores + kLoadSlackCores) {
      reasons.push_back("load average " + number(in.load_average) + " + " + count(in.threads, "thread") + " > " +
                        count(in.cores, "core") + " + " + number(kLoadSlackCores));
    }
  }
  MeasuredNoise out;
  out.noisy = !reasons.empty();
  for (size_t i = 0; i < reasons.size(); ++i) out.reason += (i ? "; " : "") + reasons[i];
  return out;
}

const HostLoad& host_load_at_start() {
  static const HostLoad load = [] {
    HostLoad h;
    h.cores = std::max(0, affinity_cores());
    h.load_average = load_average_1min();
    return h;
  }();
  return load;
}

int host_threads() { return openmp_max_threads(); }

}  // namespace moesim
