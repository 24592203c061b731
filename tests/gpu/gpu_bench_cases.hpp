// The CUDA backend's benchmark cases for one shape (run_cuda_benchmarks, tests/gpu/gpu_bench_cases.cu): the
// router, permutation GB/s against a device-to-device copy, expert GEMM TFLOP/s (grouped and per expert)
// against one dense GEMM of the same size, and the whole layer against balanced routing; every case checked
// against the CPU path first. Plain C++ (no CUDA types), so that g++ builds gpu_bench.cpp against it.
// Built only into moesim_gpu_bench (with the CUDA backend); run by scripts/gpu-check.sh.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"

namespace moesim {

struct CudaBenchConfig {
  int64_t num_tokens = 4096;
  int num_experts = 64;
  int top_k = 8;
  int64_t hidden = 2048;
  int64_t ffn = 1024;
  double skew = 1.0;        // popularity bias of the synthetic logits
  Dtype dtype = Dtype::bf16;
  int warmup = 3;
  int iterations = 20;
  uint64_t seed = 7;
};

// One measured line: median device time, a derived rate, and the baseline timed in the same run.
struct CudaBenchRow {
  std::string name;         // "permutation", "grouped_gemm", "moe_layer", ...
  double median_ms = 0;
  double min_ms = 0;
  double rate = 0;          // in `unit`
  std::string unit;         // "GB/s", "TFLOP/s", "tokens/s"
  std::string baseline;     // what it is measured against
  double baseline_ms = 0;
  double baseline_rate = 0;
  std::string verified;     // "ok" or the first mismatch against the CPU path
};

// Permutation (plan + gather) GB/s against a device-to-device copy of the same bytes; grouped GEMM
// TFLOP/s (grouped and per-expert) against one dense GEMM of the same total size; the whole layer.
std::vector<CudaBenchRow> run_cuda_benchmarks(const CudaBenchConfig& cfg);

}  // namespace moesim
