// moesim_bench: Google Benchmark over the host MoE pipeline (tests/bench/moe_bench.cpp). Its own flags,
// read before the library's (--benchmark_filter, --benchmark_format=json, --benchmark_out=FILE, ...):
//   --no-verify            skip the checks against the serial references
//   --repetitions=R        repetitions of light cases (default 5); --heavy-repetitions=R (default 3)
//   --min-time=S           minimum seconds per repetition of light cases (default 0.2)
//   --export-check=DIR     write a small layer's inputs and output as .npy and exit
// Exit status: 0, 1 when a check failed, 2 on a bad flag. Run by scripts/bench.sh.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "src/common/allocator.hpp"
#include "src/common/error.hpp"
#include "tests/bench/moe_bench.hpp"

namespace {

bool take_value(const char* arg, const char* name, std::string* value) {
  const size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=') return false;
  *value = arg + n + 1;
  return true;
}

int to_positive_int(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < 1 || x > 1000) {
    throw moesim::InputError(flag + ": expected an integer in [1, 1000], got '" + v + "'");
  }
  return static_cast<int>(x);
}

}  // namespace

int main(int argc, char** argv) {
  moesim::configure_host_allocator();  // as the moesim binary runs: the library is timed as the CLI uses it
  using moesim::bench::options;
  std::vector<char*> rest = {argv[0]};
  std::string export_dir;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string v;
      if (std::strcmp(argv[i], "--no-verify") == 0) {
        options().verify = false;
      } else if (take_value(argv[i], "--repetitions", &v)) {
        options().repetitions = to_positive_int("--repetitions", v);
      } else if (take_value(argv[i], "--heavy-repetitions", &v)) {
        options().heavy_repetitions = to_positive_int("--heavy-repetitions", v);
      } else if (take_value(argv[i], "--min-time", &v)) {
        options().min_time_s = std::atof(v.c_str());
        if (!(options().min_time_s > 0)) throw moesim::InputError("--min-time: expected seconds > 0, got '" + v + "'");
      } else if (take_value(argv[i], "--export-check", &v)) {
        export_dir = v;
      } else {
        rest.push_back(argv[i]);
      }
    }
    if (!export_dir.empty()) {
      moesim::bench::export_check(export_dir);
      return 0;
    }
  } catch (const std::exception& e) {
    std::cerr << "moesim_bench: " << e.what() << "\n";
    return 2;
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 2;
  moesim::bench::register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (options().failures > 0) {
    std::cerr << "moesim_bench: " << options().failures << " case(s) failed their check\n";
    return 1;
  }
  return 0;
}
