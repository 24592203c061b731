// moesim_bench's options and entry points: register_benchmarks() adds every case of tests/bench/moe_bench.cpp
// to Google Benchmark; export_check() writes a small layer's inputs, weights and output as .npy for the
// PyTorch agreement check (scripts/torch_moe_reference.py --check). Host only; run by scripts/bench.sh.
#pragma once

#include <string>

namespace moesim::bench {

struct BenchOptions {
  bool verify = true;            // check each case against the serial references before timing
  int repetitions = 5;           // repetitions of light cases (each at least min_time_s)
  int heavy_repetitions = 3;     // repetitions of GEMM and full-layer cases (one call each)
  double min_time_s = 0.2;
  int failures = 0;              // cases whose check failed
};

BenchOptions& options();
void register_benchmarks();
void export_check(const std::string& dir);

}  // namespace moesim::bench
