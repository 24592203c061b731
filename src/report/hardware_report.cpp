// Formats hardware profiles for `moesim hardware`: one profile as a table (bandwidth, SMs, tiles, dense
// peak and critical batch per dtype it has a figure for) or JSON, and the list of built-in profiles.
// Deterministic. Host only. Covered by tests/cli/cli_test.cpp and tests/report/report_test.cpp.
#include "src/report/hardware_report.hpp"

#include <cstdio>
#include <sstream>

#include "src/report/text_format.hpp"

namespace moesim {
namespace {

using text::fixed;

const Dtype kDtypes[] = {Dtype::fp32, Dtype::tf32, Dtype::bf16, Dtype::fp16, Dtype::fp8, Dtype::int8};

// Where the kernel model's fitted figures come from: the pooled fit (no table of its own), a fit to this
// GPU's published tables, a measurement, or the profile's own values.
std::string kernel_figures_basis(const HardwareProfile& hw) {
  const auto note = hw.sources.find("efficiency_bw");
  if (note != hw.sources.end() && note->second == kPooledFitNote)
    return "the pooled fit over every published table: no table of its own";
  if (note != hw.sources.end() && note->second.rfind("scripts/fit-profiles.sh", 0) == 0)
    return "fitted to its published tables, docs/cost-model.md";
  return hw.calibrated ? "measured" : "as the profile sets them";
}

}  // namespace

nlohmann::json hardware_json(const HardwareProfile& hw) {
  nlohmann::json peak, crit;
  for (Dtype d : kDtypes) {
    if (const auto f = peak_flops_per_s(hw, d)) {
      peak[to_string(d)] = *f;
      crit[to_string(d)] = critical_batch(hw, d);
    }
  }
  return {{"name", hw.name},
          {"description", hw.description},
          {"source", hw.source},
          {"sources", hw.sources},
          {"peak_flops_per_s", peak},
          {"critical_batch", crit},
          {"memory_bandwidth_bytes_per_s", hw.memory_bandwidth_bytes_per_s},
          {"memory_bytes", hw.memory_bytes},
          {"sm_count", hw.sm_count},
          {"smem_per_sm_bytes", hw.smem_per_sm_bytes},
          {"l2_bytes", hw.l2_bytes},
          {"launch_overhead_s", hw.launch_overhead_s},
          {"k_step_s", hw.k_step_s},
          {"link_bandwidth_bytes_per_s", hw.link_bandwidth_bytes_per_s},
          {"link_latency_s", hw.link_latency_s},
          {"inter_node_bandwidth_bytes_per_s", hw.inter_node_bandwidth_bytes_per_s},
          {"tile_m", hw.tile_m},
          {"tile_n", hw.tile_n},
          {"efficiency_flops", hw.efficiency_flops},
          {"efficiency_bw", hw.efficiency_bw},
          {"memory_compute_overlap", hw.memory_compute_overlap},
          {"kernel_figures", kernel_figures_basis(hw)},
          {"calibrated", hw.calibrated}};
}

std::string format_hardware(const HardwareProfile& hw) {
  std::ostringstream os;
  os << hw.name << (hw.description.empty() ? "" : ": " + hw.description) << "\n";
  os << "  memory bandwidth " << fixed(hw.memory_bandwidth_bytes_per_s / 1e9, 0) << " GB/s";
  if (hw.memory_bytes > 0) os << ", memory " << fixed(hw.memory_bytes / double(1ull << 30), 0) << " GiB";
  os << ", " << hw.sm_count << " SMs, tile " << hw.tile_m << "x" << hw.tile_n << ", launch "
     << fixed(hw.launch_overhead_s * 1e6, 1) << " us";
  if (hw.link_bandwidth_bytes_per_s > 0) os << ", link " << fixed(hw.link_bandwidth_bytes_per_s / 1e9, 0) << " GB/s";
  os << "\n  kernel model: efficiency flops " << hw.efficiency_flops << ", bandwidth " << hw.efficiency_bw
     << ", K step " << fixed(hw.k_step_s * 1e6, 3) << " us (" << kernel_figures_basis(hw) << ")\n\n";
  os << "  dtype  dense_TFLOP/s  bytes/weight  critical_batch\n";
  for (Dtype d : kDtypes) {
    const auto f = peak_flops_per_s(hw, d);
    if (!f) continue;
    char line[128];
    std::snprintf(line, sizeof line, "  %-5s  %13.1f  %12d  %14.1f\n", to_string(d), *f / 1e12, dtype_bytes(d),
                  critical_batch(hw, d));
    os << line;
  }
  os << "\n  critical_batch = peak_flops x bytes_per_weight / (2 x memory_bandwidth): below it a weight GEMM is\n"
        "  memory-bound and a batch costs about as much as one token.\n";
  if (!hw.source.empty()) os << "  source: " << hw.source << "\n";
  return os.str();
}


std::string format_hardware_list(const std::vector<HardwareProfile>& profiles) {
  // A dtype a profile has no figure for prints "-", not 0.
  auto tflops = [](const HardwareProfile& hw, Dtype d) {
    const auto f = peak_flops_per_s(hw, d);
    return f ? fixed(*f / 1e12, 1) : std::string("-");
  };
  auto crit = [](const HardwareProfile& hw, Dtype d) {
    return peak_flops_per_s(hw, d) ? fixed(critical_batch(hw, d), 1) : std::string("-");
  };
  std::ostringstream os;
  os << "profile        bf16/fp16 TFLOP/s  fp32 TFLOP/s  bandwidth GB/s  critical batch (fp16)\n";
  for (const HardwareProfile& hw : profiles) {
    char line[192];
    std::snprintf(line, sizeof line, "%-14s %17s  %12s  %14.0f  %21s\n", hw.name.c_str(), tflops(hw, Dtype::fp16).c_str(),
                  tflops(hw, Dtype::fp32).c_str(), hw.memory_bandwidth_bytes_per_s / 1e9, crit(hw, Dtype::fp16).c_str());
    os << line;
  }
  return os.str();
}

}  // namespace moesim
