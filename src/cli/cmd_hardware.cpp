// `moesim hardware [NAME|FILE] [--format table|json]`: lists the built-in profiles, or shows one
// with its critical batch per dtype (F x bytes_per_weight / (2 x BW), DESIGN.md "Cost model").
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "src/cli/cli_common.hpp"
#include "src/common/error.hpp"
#include "src/cost/hardware_profile.hpp"

namespace moesim::cli {
namespace {

const Dtype kDtypes[] = {Dtype::fp32, Dtype::tf32, Dtype::bf16, Dtype::fp16, Dtype::fp8, Dtype::int8};

std::string fixed(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

nlohmann::json profile_json(const HardwareProfile& hw) {
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
          {"link_bandwidth_bytes_per_s", hw.link_bandwidth_bytes_per_s},
          {"link_latency_s", hw.link_latency_s},
          {"inter_node_bandwidth_bytes_per_s", hw.inter_node_bandwidth_bytes_per_s},
          {"tile_m", hw.tile_m},
          {"tile_n", hw.tile_n},
          {"efficiency_flops", hw.efficiency_flops},
          {"efficiency_bw", hw.efficiency_bw},
          {"calibrated", hw.calibrated}};
}

std::string profile_table(const HardwareProfile& hw) {
  std::ostringstream os;
  os << hw.name << (hw.description.empty() ? "" : ": " + hw.description) << "\n";
  os << "  memory bandwidth " << fixed(hw.memory_bandwidth_bytes_per_s / 1e9, 0) << " GB/s";
  if (hw.memory_bytes > 0) os << ", memory " << fixed(hw.memory_bytes / double(1ull << 30), 0) << " GiB";
  os << ", " << hw.sm_count << " SMs, tile " << hw.tile_m << "x" << hw.tile_n << ", launch "
     << fixed(hw.launch_overhead_s * 1e6, 1) << " us";
  if (hw.link_bandwidth_bytes_per_s > 0) os << ", link " << fixed(hw.link_bandwidth_bytes_per_s / 1e9, 0) << " GB/s";
  os << "\n  efficiency: flops " << hw.efficiency_flops << ", bandwidth " << hw.efficiency_bw
     << (hw.calibrated ? " (calibrated)" : " (peak)") << "\n\n";
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

}  // namespace

int cmd_hardware(int argc, char** argv) {
  CommonOptions opts;
  bool help = false;
  std::vector<std::string> names;
  po::options_description desc("moesim hardware [NAME|FILE] [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "name", po::value(&names), "a built-in profile name or a profile YAML file")(
      "format", po::value(&opts.format)->default_value("table"), "table | json")(
      "out", po::value(&opts.out), "write to FILE (atomically) instead of stdout");
  parse_command_line(argc, argv, desc, "name", 1);
  if (help) {
    std::cout << desc << "\n";
    return kExitOk;
  }
  const ReportFormat format = parse_report_format(opts.format);
  if (format != ReportFormat::table && format != ReportFormat::json)
    throw InputError("--format: expected table or json for hardware, got '" + opts.format + "'");
  if (names.empty()) {
    nlohmann::json list = nlohmann::json::array();
    std::ostringstream os;
    os << "profile        bf16/fp16 TFLOP/s  fp32 TFLOP/s  bandwidth GB/s  critical batch (fp16)\n";
    for (const std::string& n : builtin_hardware_names()) {
      HardwareRef ref;
      ref.name = n;
      const HardwareProfile hw = load_hardware_profile(ref, "<built-in>");
      list.push_back(profile_json(hw));
      const double half = peak_flops_per_s(hw, Dtype::fp16).value_or(0);
      const double fp32 = peak_flops_per_s(hw, Dtype::fp32).value_or(0);
      char line[160];
      std::snprintf(line, sizeof line, "%-14s %17.1f  %12.1f  %14.0f  %21.1f\n", n.c_str(), half / 1e12, fp32 / 1e12,
                    hw.memory_bandwidth_bytes_per_s / 1e9, critical_batch(hw, Dtype::fp16));
      os << line;
    }
    emit(opts, format == ReportFormat::json ? list.dump(2) + "\n" : os.str());
    return kExitOk;
  }
  HardwareRef ref;
  ref.name = names.front();
  ref.origin = "NAME";  // the argument of `moesim hardware [NAME]`; a relative path is taken as given
  const HardwareProfile hw = load_hardware_profile(ref, "");
  emit(opts, format == ReportFormat::json ? profile_json(hw).dump(2) + "\n" : profile_table(hw));
  return kExitOk;
}

}  // namespace moesim::cli
