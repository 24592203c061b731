// Calibration of the host CPU as a hardware profile (`moesim calibrate`): copy bandwidth (bytes read +
// written), the weight stream of small-row GEMMs, sgemm throughput per shape, fork overhead and the
// memory/compute overlap of GEMMs near the ridge, as a `cpu-local` profile with measured efficiencies.
// CPU in GPU words: SMs = OpenMP/BLAS threads, a tile = 1 row x one SIMD register of fp32 outputs, L2 =
// the last-level cache. Timings: best of several wall-clock runs (launch: median). Host only.
// Covered by tests/cost/calibrate_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/cost/hardware_profile.hpp"

namespace moesim {

struct CalibrationOptions {
  bool quick = false;  // small buffers and few shapes: a rough profile in about a second (tests, smoke runs)
};

// One BLAS sgemm shape: C[m, n] = A[m, k] B[k, n], row-major fp32, called with every thread available.
struct GemmSample {
  int64_t m = 0, k = 0, n = 0;
  double seconds = 0;       // best of the timed calls
  double flops_per_s = 0;   // 2 m k n / seconds
};

// A GEMM whose weights come from DRAM (a new [k, n] matrix per call) with memory and compute terms of
// the same size: it shows how much of one the machine hides under the other.
struct OverlapSample {
  int64_t m = 0, k = 0, n = 0;
  double seconds = 0;    // measured, best pass / calls
  double memory_s = 0;   // the model's memory term: k n 4 B / (bandwidth x efficiency_bw)
  double compute_s = 0;  // the model's compute term: 2 m k n / (peak x efficiency_flops)
  double overlap = 1;    // (memory_s + compute_s - seconds) / min(memory_s, compute_s), clamped to [0, 1]
};

struct CalibrationResult {
  std::string cpu_model;                   // /proc/cpuinfo "model name" (or "unknown CPU")
  std::string blas;                        // the BLAS's own description (OpenBLAS config and core)
  int threads = 1;                         // OpenMP threads = BLAS threads = "SMs"
  int simd_fp32_lanes = 4;                 // fp32 lanes of the widest vector unit (the tile width)
  double memory_bytes = 0;                 // physical memory
  double llc_bytes = 0;                    // last-level cache, 0 when unknown
  double copy_bytes = 0;                   // size of each copy buffer
  double copy_bandwidth_bytes_per_s = 0;   // (read + written bytes) / time, best of the repeats
  double stream_bandwidth_bytes_per_s = 0; // weight bytes / time of 1-row sgemms, one per thread in parallel
  std::vector<GemmSample> gemm;            // per shape, in measuring order
  double peak_fp32_flops_per_s = 0;        // the best rate of any shape
  double efficiency_flops = 1;             // median rate of the compute-bound shapes (m >= 256) / peak
  double efficiency_bw = 1;                // stream / copy bandwidth, at most 1
  std::vector<OverlapSample> overlap;      // threaded GEMMs near the ridge, weights from DRAM
  double memory_compute_overlap = 1;       // median of the samples' overlap
  double launch_overhead_s = 0;            // an OpenMP fork-join around a tiny sgemm, median
  double seconds = 0;                      // the calibration's own wall time
  MachineSignature machine;                // this machine, written into the profile
  double load_before = -1;                 // 1-minute load average when the calibration started (-1: unknown)
};

// This machine as a profile records it, with `threads` OpenMP/BLAS threads.
MachineSignature this_machine(int threads);

// Why a calibration must not become a profile, or "" when it may: taken under heavy load (the 1-minute
// load average above cores + 1 when it started: other processes held the cores), or figures no CPU has:
// peak fp32 below 0.5 GFLOP/s per SIMD lane per thread, copy bandwidth below 1 GB/s, an efficiency below
// 0.05. `moesim calibrate --force` writes it anyway.
std::string calibration_problem(const CalibrationResult& r);

// Measures this machine. Allocates 2 x 256 MiB for the copy and 256 MiB of weights (quick: 2 x 32 MiB
// and 32 MiB); takes about 10 s (quick: about 1 s) on an idle 2-core machine.
CalibrationResult calibrate_host(const CalibrationOptions& opts);

// The result as a hardware profile named `name` (configs/hardware format, loadable by
// parse_hardware_profile), with a source note per figure and the per-shape GEMM table as comments.
// `note` (may be empty) is appended to the profile's source: how and where the run was made.
std::string calibration_profile_yaml(const CalibrationResult& r, const std::string& name,
                                     const std::string& note = "");

// A short human-readable summary (bandwidths, peak, efficiencies, the GEMM table).
std::string calibration_summary(const CalibrationResult& r);

// ---- a GPU (`moesim calibrate --backend cuda`) ----------------------------------------------------
// What measure_cuda_device (kernels/cuda_backend.hpp) measured, as plain numbers, so that the fit below is
// host code, tested without a device.
struct DeviceExpertSample {
  int64_t rows = 0;
  double seconds = 0;  // one SwiGLU expert on `rows` rows: up GEMM, SwiGLU, down GEMM (CUDA events, median)
};
struct DeviceMeasurements {
  std::string device;                     // e.g. "NVIDIA H200 (sm_90, 140 GiB, CUDA runtime 13.0)"
  Dtype dtype = Dtype::bf16;              // expert storage of the timings
  int64_t hidden = 0, ffn = 0;            // expert shape of the timings
  double copy_bandwidth_bytes_per_s = 0;  // device-to-device copy, bytes read + written
  double launch_overhead_s = 0;           // an empty kernel, median
  std::vector<DeviceExpertSample> expert;
};

// The datasheet profile's efficiencies fitted to the per-expert timings: efficiency_bw and
// efficiency_flops in [0.001, 1] that minimise the squared log error of the kernel model (roofline.hpp
// kernel_time_s: the launches at the measured overhead, the datasheet's overlap and K step, ExpertRoofline at
// the datasheet's peak and bandwidth) against the measured times.
// A grid search, so it is deterministic. bw_samples / flops_samples: the samples bound by each term at the
// fit; a term that binds no sample keeps the datasheet's value when that does not change which binds.
struct DeviceFit {
  double efficiency_flops = 1, efficiency_bw = 1;
  int flops_samples = 0, bw_samples = 0;
  struct Row {
    int64_t rows = 0;
    double measured_s = 0, memory_s = 0, compute_s = 0, fitted_s = 0;  // fitted_s: the kernel model
    bool compute_bound = false;
  };
  std::vector<Row> rows;
};
struct HardwareProfile;
DeviceFit fit_device(const DeviceMeasurements& m, const HardwareProfile& datasheet);

// The datasheet profile's YAML (`base_yaml`, e.g. configs/hardware/h200.yaml) with name, description,
// launch_overhead_us, efficiency_flops, efficiency_bw and calibrated: true replaced and a source note for
// each; the per-expert table and the measured copy bandwidth as comments. Loads with parse_hardware_profile.
std::string device_profile_yaml(const DeviceMeasurements& m, const std::string& base_yaml, const std::string& name,
                                const std::string& note = "");

}  // namespace moesim
