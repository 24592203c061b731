// Calibration results as hardware profiles (see calibrate.hpp): the host's `cpu-local` profile YAML and
// its summary from calibrate_host's measurements (calibrate.cpp), and for a GPU the least-squares fit of
// the datasheet profile's efficiencies to measured expert timings and the resulting profile YAML. Pure
// functions of their inputs apart from the date in the source notes; the fit is a deterministic grid
// search. Host only. Covered by tests/cost/calibrate_test.cpp.
#include "src/cost/calibrate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "src/common/clock.hpp"
#include "src/common/error.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/cost/roofline.hpp"

namespace moesim {
namespace {

std::string num(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

// YAML double-quoted scalar.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string calibration_profile_yaml(const CalibrationResult& r, const std::string& name, const std::string& note) {
  const std::string date = utc_now("%Y-%m-%d");
  const std::string how = "moesim calibrate, " + date + ", " + std::to_string(r.threads) + " threads";
  std::ostringstream os;
  os << "# " << name << ": this machine, measured by `moesim calibrate` on " << date << " (" << num(r.seconds, 3)
     << " s).\n"
     << "# CPU: " << r.cpu_model << "; BLAS: " << r.blas << ".\n"
     << "# The CPU in the GPU vocabulary: sm_count = threads (cores), a tile = 1 row x one SIMD register of\n"
     << "# fp32 outputs (tile_m 1, tile_n = lanes), l2_mib = the last-level cache. The executed pipeline runs\n"
     << "# fp32 only, so fp32 is the only peak. peak = the best sgemm rate measured here (no datasheet peak\n"
     << "# is trusted inside a VM); efficiency_flops = median rate of the m >= 256 shapes / peak;\n"
     << "# memory_bandwidth = parallel copy, bytes read + written; efficiency_bw = 1-row sgemm weight stream\n"
     << "# (one per thread) / copy, at most 1; memory_compute_overlap: how much of the shorter of the memory\n"
     << "# and compute terms hides under the longer (1: roofline max, 0: their sum), fitted to threaded sgemms\n"
     << "# near the ridge whose weights stream from DRAM.\n"
     << "# sgemm throughput per shape (row-major [m, k] x [k, n], all threads):\n"
     << "#        m       k       n     GFLOP/s   of peak\n";
  for (const GemmSample& s : r.gemm) {
    char line[128];
    std::snprintf(line, sizeof line, "#  %7lld %7lld %7lld  %10.2f  %7.3f\n", static_cast<long long>(s.m),
                  static_cast<long long>(s.k), static_cast<long long>(s.n), s.flops_per_s / 1e9,
                  s.flops_per_s / r.peak_fp32_flops_per_s);
    os << line;
  }
  os << "name: " << name << "\n"
     << "description: " << quoted(r.cpu_model + ", " + std::to_string(r.threads) + " threads (moesim calibrate)") << "\n"
     << "source: " << quoted(how + "; " + r.blas + (note.empty() ? "" : "; " + note)) << "\n"
     << "peak_tflops: {fp32: " << num(r.peak_fp32_flops_per_s / 1e12, 5) << "}\n"
     << "memory_bandwidth_gbs: " << num(r.copy_bandwidth_bytes_per_s / 1e9, 5) << "\n";
  if (r.memory_bytes > 0) os << "memory_gib: " << num(r.memory_bytes / (1024.0 * 1024 * 1024), 4) << "\n";
  os << "sm_count: " << r.threads << "\n"
     << "link_bandwidth_gbs: " << num(r.copy_bandwidth_bytes_per_s / 2e9, 5) << "\n";
  if (r.llc_bytes > 0) os << "l2_mib: " << num(r.llc_bytes / (1024.0 * 1024), 4) << "\n";
  os << "launch_overhead_us: " << num(r.launch_overhead_s * 1e6, 4) << "\n"
     << "tile_m: 1\n"
     << "k_step_us: 0\n"
     << "tile_n: " << r.simd_fp32_lanes << "\n"
     << "efficiency_flops: " << num(r.efficiency_flops, 4) << "\n"
     << "efficiency_bw: " << num(r.efficiency_bw, 4) << "\n"
     << "memory_compute_overlap: " << num(r.memory_compute_overlap, 3) << "\n"
     << "calibrated: true\n"
     << "machine: {cpu_model: " << quoted(r.machine.cpu_model) << ", cores: " << r.machine.cores
     << ", blas_core: " << quoted(r.machine.blas_core) << ", threads: " << r.machine.threads << "}\n"
     << "sources:\n"
     << "  peak_tflops.fp32: " << quoted(how + ": best sgemm rate over " + std::to_string(r.gemm.size()) + " shapes") << "\n"
     << "  memory_bandwidth_gbs: "
     << quoted(how + ": parallel memcpy of 2 x " + num(r.copy_bytes / (1024.0 * 1024), 4) +
               " MiB, bytes read + written, best run")
     << "\n";
  if (r.memory_bytes > 0) os << "  memory_gib: " << quoted("sysconf(_SC_PHYS_PAGES) x page size") << "\n";
  os << "  sm_count: " << quoted("OpenMP/BLAS threads: one core = one SM") << "\n"
     << "  link_bandwidth_gbs: "
     << quoted("expert-parallel 'devices' on one host exchange activations by memcpy: the copy's payload rate, "
               "half its read + written bandwidth")
     << "\n";
  if (r.llc_bytes > 0) os << "  l2_mib: " << quoted("sysfs (cpu0 cache sizes): the last-level cache, the CPU's L2 analogue") << "\n";
  os << "  launch_overhead_us: " << quoted(how + ": OpenMP fork-join around a 1x16x16 sgemm, median") << "\n"
     << "  tile_m: " << quoted("a CPU GEMM pads no rows: one row is the quantum") << "\n"
     << "  k_step_us: " << quoted("a CPU GEMM has no K-step floor: the kernel model counts none below 16-row tiles") << "\n"
     << "  tile_n: " << quoted("fp32 lanes of the widest SIMD register (" + std::to_string(r.simd_fp32_lanes) + ")") << "\n"
     << "  efficiency_flops: " << quoted(how + ": median sgemm rate of the m >= 256 shapes / peak") << "\n"
     << "  efficiency_bw: "
     << quoted(how + ": 1-row sgemm weight stream " + num(r.stream_bandwidth_bytes_per_s / 1e9, 4) +
               " GB/s / copy " + num(r.copy_bandwidth_bytes_per_s / 1e9, 4) + " GB/s, at most 1")
     << "\n"
     << "  memory_compute_overlap: "
     << quoted(how + ": median over threaded sgemms near the ridge, weights from DRAM, of (memory + compute - "
               "measured) / min(memory, compute)")
     << "\n"
     << "  calibrated: " << quoted(how) << "\n";
  return os.str();
}

std::string calibration_summary(const CalibrationResult& r) {
  std::ostringstream os;
  os << "cpu: " << r.cpu_model << ", " << r.threads << " threads, " << r.simd_fp32_lanes << " fp32 SIMD lanes\n"
     << "blas: " << r.blas << "\n"
     << "copy bandwidth (read + written): " << num(r.copy_bandwidth_bytes_per_s / 1e9, 4) << " GB/s\n"
     << "1-row sgemm weight stream:       " << num(r.stream_bandwidth_bytes_per_s / 1e9, 4) << " GB/s (efficiency_bw "
     << num(r.efficiency_bw, 3) << ")\n"
     << "best sgemm rate (peak):          " << num(r.peak_fp32_flops_per_s / 1e9, 4) << " GFLOP/s (efficiency_flops "
     << num(r.efficiency_flops, 3) << ")\n"
     << "fork-join + tiny sgemm:          " << num(r.launch_overhead_s * 1e6, 3) << " us\n"
     << "memory/compute overlap:          " << num(r.memory_compute_overlap, 3) << " (";
  for (size_t i = 0; i < r.overlap.size(); ++i) {
    const OverlapSample& o = r.overlap[i];
    os << (i ? "; " : "") << "m " << o.m << ": " << num(o.seconds * 1e3, 3) << " ms measured, memory "
       << num(o.memory_s * 1e3, 3) << " + compute " << num(o.compute_s * 1e3, 3) << " ms";
  }
  os << ")\n"
     << "sgemm per shape:\n      m       k       n     GFLOP/s\n";
  for (const GemmSample& s : r.gemm) {
    char line[128];
    std::snprintf(line, sizeof line, "%7lld %7lld %7lld  %10.2f\n", static_cast<long long>(s.m),
                  static_cast<long long>(s.k), static_cast<long long>(s.n), s.flops_per_s / 1e9);
    os << line;
  }
  os << "measured in " << num(r.seconds, 3) << " s\n";
  return os.str();
}

DeviceFit fit_device(const DeviceMeasurements& m, const HardwareProfile& datasheet) {
  MOESIM_REQUIRE(m.hidden >= 1 && m.ffn >= 1, "device measurements need the expert shape");
  HardwareProfile hw = datasheet;
  hw.launch_overhead_s = m.launch_overhead_s;
  const ExpertRoofline rm(hw, m.hidden, m.ffn, m.dtype);
  DeviceFit fit;
  struct Sample {
    KernelTerms terms;
    double log_measured;
  };
  std::vector<Sample> samples;
  for (const DeviceExpertSample& s : m.expert) {
    GroupedCost g(rm);
    g.add(s.rows);
    const KernelTerms t = g.terms();
    DeviceFit::Row row;
    row.rows = s.rows;
    row.measured_s = s.seconds;
    row.memory_s = t.memory_s;
    row.compute_s = t.compute_s;
    fit.rows.push_back(row);
    if (s.rows >= 1 && s.seconds > 0 && std::isfinite(s.seconds)) {
      samples.push_back({t, std::log(s.seconds)});
    }
  }
  // The kernel model with the measured launch, the datasheet's overlap and K step, and the efficiencies
  // tried.
  const auto model_s = [&](const Sample& s, double eff_bw, double eff_flops) {
    KernelFigures f = KernelFigures::of(hw);
    f.efficiency_bw = eff_bw;
    f.efficiency_flops = eff_flops;
    return kernel_time_s(s.terms, f);
  };
  const auto loss = [&](double log_bw, double log_flops) {
    const double eb = std::exp(log_bw), ef = std::exp(log_flops);
    double sum = 0;
    for (const Sample& s : samples) {
      const double d = std::log(model_s(s, eb, ef)) - s.log_measured;
      sum += d * d;
    }
    return sum;
  };
  // Least squares in log time over log efficiencies in [0.001, 1]: a 121 x 121 grid, then three rounds
  // of a 21 x 21 grid around the best point at a tenth of the step. Scanned from the highest efficiencies
  // down, so where a term binds no sample (the loss is flat along it) the highest value, 1, is kept.
  const double lo = std::log(0.001);
  double step = -lo / 120.0, best_bw = 0, best_flops = 0, best = HUGE_VAL;
  if (!samples.empty()) {
    for (int i = 120; i >= 0; --i) {
      for (int j = 120; j >= 0; --j) {
        const double l = loss(lo + i * step, lo + j * step);
        if (l < best) best = l, best_bw = lo + i * step, best_flops = lo + j * step;
      }
    }
    for (int round = 0; round < 3; ++round) {
      const double c_bw = best_bw, c_flops = best_flops;
      step /= 10.0;
      for (int i = 10; i >= -10; --i) {
        for (int j = 10; j >= -10; --j) {
          const double a = std::clamp(c_bw + i * step, lo, 0.0), b = std::clamp(c_flops + j * step, lo, 0.0);
          const double l = loss(a, b);
          if (l < best) best = l, best_bw = a, best_flops = b;
        }
      }
    }
  }
  fit.efficiency_bw = samples.empty() ? datasheet.efficiency_bw : std::exp(best_bw);
  fit.efficiency_flops = samples.empty() ? datasheet.efficiency_flops : std::exp(best_flops);
  // A term that no sample is bound by is not measured: the datasheet's value stands when the samples
  // stay bound as they are with it.
  const auto count_bound = [&](double eb, double ef, bool compute) {
    int n = 0;
    for (const Sample& s : samples) n += ((s.terms.compute_s / ef > s.terms.memory_s / eb) == compute) ? 1 : 0;
    return n;
  };
  fit.flops_samples = count_bound(fit.efficiency_bw, fit.efficiency_flops, true);
  fit.bw_samples = count_bound(fit.efficiency_bw, fit.efficiency_flops, false);
  if (fit.flops_samples == 0 && count_bound(fit.efficiency_bw, datasheet.efficiency_flops, true) == 0) {
    fit.efficiency_flops = datasheet.efficiency_flops;
  }
  if (fit.bw_samples == 0 && count_bound(datasheet.efficiency_bw, fit.efficiency_flops, false) == 0) {
    fit.efficiency_bw = datasheet.efficiency_bw;
  }
  hw.efficiency_flops = fit.efficiency_flops;
  hw.efficiency_bw = fit.efficiency_bw;
  const ExpertRoofline fitted(hw, m.hidden, m.ffn, m.dtype);
  for (DeviceFit::Row& row : fit.rows) {
    row.fitted_s = expert_time(fitted, row.rows).quantized_s;
    row.compute_bound = row.compute_s / fit.efficiency_flops > row.memory_s / fit.efficiency_bw;
  }
  return fit;
}

std::string device_profile_yaml(const DeviceMeasurements& m, const std::string& base_yaml, const std::string& name,
                                const std::string& note) {
  const HardwareProfile datasheet = parse_hardware_profile(base_yaml, "--base");
  const DeviceFit fit = fit_device(m, datasheet);
  YAML::Node root = YAML::Load(base_yaml);
  const std::string date = utc_now("%Y-%m-%d");
  const std::string how = "moesim calibrate --backend cuda, " + date + ", " + m.device + ", " + to_string(m.dtype) +
                          " experts " + std::to_string(m.hidden) + " x " + std::to_string(m.ffn) +
                          (note.empty() ? "" : "; " + note);
  const std::string base_name = datasheet.name;
  root["name"] = name;
  root["description"] = m.device + " (measured; datasheet figures from " + base_name + ")";
  root["source"] = "datasheet profile " + base_name + " with efficiencies and launch overhead measured by " + how;
  root["launch_overhead_us"] = YAML::Load(num(m.launch_overhead_s * 1e6, 4));
  root["efficiency_flops"] = YAML::Load(num(fit.efficiency_flops, 4));
  root["efficiency_bw"] = YAML::Load(num(fit.efficiency_bw, 4));
  root["calibrated"] = true;
  if (!root["sources"] || !root["sources"].IsMap()) root["sources"] = YAML::Node(YAML::NodeType::Map);
  root["sources"]["launch_overhead_us"] = how + ": an empty kernel, launch to completion, median";
  const std::string fitted = how + ": least-squares fit (log time) of the kernel model to " +
                             std::to_string(fit.rows.size()) + " expert timings, ";
  root["sources"]["efficiency_flops"] =
      fit.flops_samples > 0 ? fitted + std::to_string(fit.flops_samples) + " of them bound by compute"
                            : "no expert timing bound by compute: the datasheet profile's value";
  root["sources"]["efficiency_bw"] =
      fit.bw_samples > 0 ? fitted + std::to_string(fit.bw_samples) + " of them bound by memory"
                         : "no expert timing bound by memory: the datasheet profile's value";
  YAML::Emitter out;
  out << root;
  std::ostringstream os;
  os << "# " << name << ": " << m.device << ", measured by `moesim calibrate --backend cuda` on " << date << ".\n"
     << "# Datasheet figures (peaks, bandwidth, SMs, tiles, links) from " << base_name
     << "; fitted here: efficiency_flops, efficiency_bw, launch_overhead_us.\n"
     << "# Device-to-device copy: " << num(m.copy_bandwidth_bytes_per_s / 1e9, 4) << " GB/s read + written ("
     << num(m.copy_bandwidth_bytes_per_s / datasheet.memory_bandwidth_bytes_per_s, 3) << " of the datasheet "
     << num(datasheet.memory_bandwidth_bytes_per_s / 1e9, 4) << " GB/s).\n"
     << "# One " << to_string(m.dtype) << " SwiGLU expert, hidden " << m.hidden << ", ffn " << m.ffn
     << " (times in us; model terms at the datasheet peak and bandwidth):\n"
     << "#     rows   measured     memory    compute  calibrated  bound\n";
  for (const DeviceFit::Row& r : fit.rows) {
    char line[160];
    std::snprintf(line, sizeof line, "#  %7lld  %9.2f  %9.2f  %9.2f  %10.2f  %s\n", static_cast<long long>(r.rows),
                  r.measured_s * 1e6, r.memory_s * 1e6, r.compute_s * 1e6, r.fitted_s * 1e6,
                  r.compute_bound ? "compute" : "memory");
    os << line;
  }
  os << out.c_str() << "\n";
  const std::string text = os.str();
  parse_hardware_profile(text, name + ".yaml");  // loads as written, or this is a bug reported before writing
  return text;
}

}  // namespace moesim
