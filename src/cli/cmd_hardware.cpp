// `moesim hardware [NAME|FILE] [--format table|json]`: lists the built-in profiles, or shows one
// with its critical batch per dtype (F x bytes_per_weight / (2 x BW), docs/design.md "Cost model").
#include <iostream>
#include <vector>

#include "src/cli/cli_common.hpp"
#include "src/common/error.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/report/hardware_report.hpp"

namespace moesim::cli {

int cmd_hardware(int argc, char** argv) {
  CommonOptions opts;
  bool help = false;
  std::vector<std::string> names;
  po::options_description desc("moesim hardware [NAME|FILE] [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "name", po::value(&names), "a built-in profile name or a profile YAML file")(
      "format", po::value(&opts.format)->default_value("table"), "table | json")(
      "out", po::value(&opts.out), "write to FILE (atomically) instead of stdout");
  if (parse_or_help(argc, argv, desc, "name", 1, help)) return kExitOk;
  const ReportFormat format = parse_report_format(opts.format);
  if (format != ReportFormat::table && format != ReportFormat::json)
    throw InputError("--format: expected table or json for hardware, got '" + opts.format + "'");
  if (names.empty()) {
    nlohmann::json list = nlohmann::json::array();
    std::vector<HardwareProfile> profiles;
    for (const std::string& n : builtin_hardware_names()) {
      HardwareRef ref;
      ref.name = n;
      profiles.push_back(load_hardware_profile(ref, "<built-in>"));
      list.push_back(hardware_json(profiles.back()));
    }
    emit(opts, format == ReportFormat::json ? list.dump(2) + "\n" : format_hardware_list(profiles));
    return kExitOk;
  }
  HardwareRef ref;
  ref.name = names.front();
  ref.origin = "NAME";  // the argument of `moesim hardware [NAME]`; a relative path is taken as given
  const HardwareProfile hw = load_hardware_profile(ref, "");
  emit(opts, format == ReportFormat::json ? hardware_json(hw).dump(2) + "\n" : format_hardware(hw));
  return kExitOk;
}

}  // namespace moesim::cli
