// Hardware profiles for the cost model: dense peak FLOP/s per dtype, memory and link bandwidths, SM
// count, GEMM tile and efficiency factors, read from YAML (configs/hardware/NAME.yaml, a file, or an
// inline table) with a source note per figure. Host only, deterministic.
// Covered by tests/cost/hardware_profile_test.cpp.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"

namespace moesim {

// The machine a measured CPU profile belongs to (moesim calibrate writes it; datasheet GPU profiles have
// none): the same model on another CPU, core count, BLAS kernel or thread count predicts another machine.
struct MachineSignature {
  std::string cpu_model;   // /proc/cpuinfo "model name"
  int cores = 0;           // cores online
  std::string blas_core;   // the BLAS kernel in use (openblas_get_corename, set by OPENBLAS_CORETYPE)
  int threads = 0;         // OpenMP/BLAS threads the profile was measured with
  bool operator==(const MachineSignature& o) const {
    return cpu_model == o.cpu_model && cores == o.cores && blas_core == o.blas_core && threads == o.threads;
  }
  bool operator!=(const MachineSignature& o) const { return !(*this == o); }
};
// "CPU, N cores, BLAS core C, T threads".
std::string describe(const MachineSignature& m);

// The pooled fit: the kernel model's four fitted figures (roofline.hpp kernel_time_s) fitted by
// scripts/fit-profiles.sh to every published table at once, as fractions of each
// GPU's own peaks and per-kernel costs. A profile that does not set a figure takes it from here (GPUs with
// no table of their own: l4, a10, t4, mi300x, a user's file); its `sources` note says so.
// docs/cost-model.md "Fitted profiles" lists the tables and the held-out error; a test refits and
// compares.
struct PooledFit {
  static constexpr double efficiency_bw = 0.8028;
  static constexpr double efficiency_flops = 0.516;
  static constexpr double launch_overhead_us = 5.539;
  static constexpr double k_step_us = 0.5023;
};
extern const char* const kPooledFitNote;
// What weight-only 4-bit MoE kernels reach of a GPU's fitted efficiencies (roofline.hpp KernelFigures),
// fitted by scripts/fit-profiles.sh on the published tables' int4 (vLLM Marlin W4A16) balanced rows with
// each GPU's shipped figures; their power-law rows and the tables without a balanced row are held out.
struct WeightOnlyFit {
  static constexpr double bw_share = 0.3116;
  static constexpr double flops_share = 0.2644;
  static constexpr double reread_share = 0.7068;
  static constexpr double k_step_share = 2.26;
};

// The kernel model's error where it is worst, the decode regime with wide expert parallelism (validate
// --published "error by regime": at most 64 tokens routed a batch, ep >= 8), its held-out column: what an
// answer in that regime quotes beside it (src/report/verdict.cpp). Written by scripts/fit-profiles.sh with
// the figures; a test recomputes it.
struct DecodeRegimeError {
  static constexpr double decode_median_abs = 0.102212;
  static constexpr double decode_mean = -0.0457727;
  static constexpr int decode_points = 184;
};

// The all-to-all kernels' figures (src/cost/all_to_all.hpp), fitted by `moesim validate --published` to the
// published dispatch/combine tables of each kernel family at once (data/validation, phase column; docs/cost-model.md
// "The all-to-all"): a floor per phase (the kernel's own fixed cost: launch, notify, synchronisation) and the
// fraction of each link's bandwidth a copy achieves. A profile that does not set a figure takes it from
// here; its `sources` note says so. A test refits and compares.
struct A2aPooledFit {
  // normal: DeepEP normal (H800) and TensorRT-LLM's one-sided NVLink all-to-all (GB200 NVL72).
  static constexpr double normal_dispatch_us = 13.16, normal_combine_us = 22.71;
  static constexpr double normal_scale_up_efficiency = 0.7305, normal_scale_out_efficiency = 0.9552;
  // low_latency: DeepEP low-latency (H800) and NCCL EP low-latency (H100).
  static constexpr double low_latency_dispatch_us = 18.97, low_latency_combine_us = 21.67;
  static constexpr double low_latency_scale_up_efficiency = 0.6457, low_latency_scale_out_efficiency = 0.8768;
};
extern const char* const kA2aPooledFitNote;

// One accelerator, in SI units. YAML keys (and their units) in parse_hardware_profile below.
struct HardwareProfile {
  std::string name;
  std::string description;
  std::string source;                          // where the profile as a whole comes from
  std::map<std::string, std::string> sources;  // YAML key (e.g. "peak_tflops.fp16") -> its source note
  // Dense (never 2:4-sparse) peak FLOP/s, tensor/matrix cores where the chip has them; int8 in OP/s.
  // Absent where the chip has no such math path (T4 has no bf16, tf32 or fp8).
  std::optional<double> peak_fp32_flops_per_s, peak_tf32_flops_per_s, peak_bf16_flops_per_s,
      peak_fp16_flops_per_s, peak_fp8_flops_per_s, peak_int8_flops_per_s;
  double memory_bandwidth_bytes_per_s = 0;  // DRAM/HBM
  double memory_bytes = 0;                  // 0 = not given
  int sm_count = 0;                         // SMs (NVIDIA) or CUs (AMD)
  double smem_per_sm_bytes = 0;             // 0 = not given
  double l2_bytes = 0;                      // 0 = not given
  double launch_overhead_s = PooledFit::launch_overhead_us * 1e-6;  // per kernel launch
  // One K step of a GEMM tile's main loop (roofline.hpp KernelTerms::k_steps): the latency floor.
  double k_step_s = PooledFit::k_step_us * 1e-6;
  double link_bandwidth_bytes_per_s = 0;    // device-to-device, one direction, per device; 0 = none
  double link_latency_s = 0;                // per all-to-all phase
  int devices_per_node = 0;                 // GPUs per scale-up domain; 0 = every device shares the link
  double inter_node_bandwidth_bytes_per_s = 0;  // per device (its scale-out NIC), one direction; 0 = none
  double inter_node_latency_s = 0;          // one scale-out (RDMA) hop
  // The all-to-all kernels' figures (A2aPooledFit): a floor per phase and the achieved fraction of the
  // scale-up link's and the NIC's bandwidth, for the normal and the low_latency kernels.
  double a2a_normal_dispatch_s = A2aPooledFit::normal_dispatch_us * 1e-6;
  double a2a_normal_combine_s = A2aPooledFit::normal_combine_us * 1e-6;
  double a2a_normal_scale_up_efficiency = A2aPooledFit::normal_scale_up_efficiency;
  double a2a_normal_scale_out_efficiency = A2aPooledFit::normal_scale_out_efficiency;
  double a2a_low_latency_dispatch_s = A2aPooledFit::low_latency_dispatch_us * 1e-6;
  double a2a_low_latency_combine_s = A2aPooledFit::low_latency_combine_us * 1e-6;
  double a2a_low_latency_scale_up_efficiency = A2aPooledFit::low_latency_scale_up_efficiency;
  double a2a_low_latency_scale_out_efficiency = A2aPooledFit::low_latency_scale_out_efficiency;
  int tile_m = 128;                         // GEMM tile rows (tokens; the largest row tile, roofline.hpp)
                                            // and columns (outputs)
  int tile_n = 128;
  double efficiency_flops = PooledFit::efficiency_flops;  // achievable fraction of peak FLOP/s, (0, 1]
  double efficiency_bw = PooledFit::efficiency_bw;        // achievable fraction of memory bandwidth, (0, 1]
  // Fraction of the shorter of the memory and compute terms that runs under the longer one (the kernel
  // model's combine_terms): 1 is the roofline's max (GPUs overlap loads and math); 0 adds the two, as a
  // CPU BLAS that packs a weight panel and then computes on it does. Measured by moesim calibrate.
  double memory_compute_overlap = 1.0;
  bool calibrated = false;                  // the efficiencies were measured (moesim calibrate)
  // Tensor cores that scale MXFP8 blocks of 32 in hardware (Blackwell); `moesim train` refuses
  // train.precision mxfp8 on a profile without them (Hopper quantizes fp8 per tensor or per block in software).
  bool mxfp8 = false;
  std::optional<MachineSignature> machine;  // where a CPU profile was measured (not in the digest)
};

// Dense peak FLOP/s of `dtype`, or nullopt when the profile has none.
std::optional<double> peak_flops_per_s(const HardwareProfile& hw, Dtype dtype);

// Like peak_flops_per_s, but throws ConfigError naming model.dtype and the dtypes the profile has.
double require_peak_flops_per_s(const HardwareProfile& hw, Dtype dtype);

// Parses a profile. YAML keys (all optional unless marked; unknown keys are errors):
//   name, description, source: strings; sources: map from a key below (or peak_tflops.DTYPE) to a note;
//   peak_tflops: {fp32|tf32|bf16|fp16|fp8|int8: dense TFLOP/s}   (required, at least one)
//   memory_bandwidth_gbs (required, 1e9 B/s), sm_count (required), memory_gib (2^30 B),
//   smem_per_sm_kib (2^10 B), l2_mib (2^20 B), launch_overhead_us, k_step_us (>= 0), link_bandwidth_gbs,
//   link_latency_us (default 0), devices_per_node, inter_node_bandwidth_gbs, inter_node_latency_us (default
//   0), a2a_{normal,low_latency}_{dispatch,combine}_us (>= 0) and
//   a2a_{normal,low_latency}_scale_{up,out}_efficiency (in (0, 1]; default A2aPooledFit), tile_m, tile_n (default
//   128), efficiency_flops, efficiency_bw (in (0, 1]), memory_compute_overlap (default 1, in [0, 1]),
//   calibrated (default false), mxfp8 (default false: MXFP8 tensor cores); launch_overhead_us, k_step_us and the efficiencies default to the
//   pooled fit (PooledFit), and a profile that takes one gets kPooledFitNote as its source note;
//   base: NAME of a built-in profile whose values the other keys override (inline tables mostly);
//   machine: {cpu_model: STRING, cores: N, blas_core: STRING, threads: N} (all four; a measured CPU).
// Errors: ConfigError "SOURCE:LINE: hardware.KEY: expected WHAT, got VALUE".
HardwareProfile parse_hardware_profile(const std::string& yaml_text, const std::string& source_name);

// Resolves an experiment's hardware: inline_yaml when set (errors name experiment_file, without line
// numbers: the inline table was re-emitted), else the built-in configs/hardware/NAME.yaml, else NAME
// as a file path (as given, then relative to the experiment file's folder; experiment_file may be empty).
// A name that is neither: ConfigError "ORIGIN: expected a built-in profile (NAMES) or a readable profile
// YAML file, got 'NAME'", ORIGIN being ref.origin, or "EXPERIMENT_FILE: hardware" when that is empty.
HardwareProfile load_hardware_profile(const HardwareRef& ref, const std::string& experiment_file);

// The profile YAML file `ref` names, as load_hardware_profile finds it (the name as a path, then beside the
// experiment file); "" for an inline table, a built-in name or no readable file.
std::string hardware_profile_file(const HardwareRef& ref, const std::string& experiment_file);

// The digest (common/digest.hpp) of every value of the profile the cost model reads: the name, the
// peaks, bandwidths, sizes, tiles, efficiencies, overlap and `calibrated`, each printed to 17
// significant digits. The description and source notes are left out, so editing a note keeps it.
std::string hardware_digest(const HardwareProfile& hw);

// Names of the built-in profiles (configs/hardware/*.yaml compiled into the binary), sorted.
std::vector<std::string> builtin_hardware_names();

// The weights-only critical batch (docs/design.md "Cost model"): F * bytes_per_weight / (2 * BW), at peak
// (no efficiency factors). 0 when the profile has no peak for `dtype`.
double critical_batch(const HardwareProfile& hw, const ExpertFormat& format);

}  // namespace moesim
