// `moesim validate [FILE] [--batches 1..4096*2] [--hardware cpu-local|FILE] [--format table|csv|json]`:
// the executed CPU pipeline over a batch sweep against the cost model on a host profile, per point and
// as a median absolute percentage error (src/sweep/validate.hpp). The default profile is
// configs/hardware/cpu-local.yaml under the current folder when it exists (a fresh calibration), else
// the built-in cpu-local. Covered by tests/sweep/validate_test.cpp (through the binary).
#include <algorithm>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "src/cli/cli_common.hpp"
#include "src/common/error.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/sweep/sweep.hpp"
#include "src/sweep/validate.hpp"
#include "src/report/validate_report.hpp"

namespace moesim::cli {
int cmd_validate(int argc, char** argv) {
  CommonOptions opts;
  bool help = false;
  std::string batches = "1..4096*2", hardware;
  po::options_description desc("moesim validate [FILE] [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "file", po::value(&opts.files), "experiment YAML (default: the built-in quickstart); its execute: size is validated")(
      "batches", po::value(&batches)->default_value("1..4096*2"), "batch sizes: values and ranges as in sweep --vary")(
      "hardware", po::value(&hardware),
      "host profile: a name or file (default: ./configs/hardware/cpu-local.yaml if present, else built-in cpu-local); "
      "--set hardware=NAME|FILE does the same")(
      "memory-limit", po::value(&opts.memory_limit), "refuse points whose memory estimate exceeds this (e.g. 4GiB)");
  add_common_options(desc, opts, false);
  if (parse_or_help(argc, argv, desc, "file", 1, help)) return kExitOk;
  apply_threads(opts.threads);
  const ReportFormat format = parse_report_format(opts.format);
  if (format == ReportFormat::markdown)
    throw InputError("--format: expected table, csv or json for validate, got '" + opts.format + "'");
  const std::vector<std::string> values = expand_sweep_values(batches, "--batches " + batches);
  const Experiment base = load_experiment_for(opts);
  // The host profile: --hardware, or --set hardware[.KEY]=... (the experiment's own hardware: key names the
  // modeled GPU, not this host, so only an explicit --set replaces the default). Both at once is ambiguous.
  const bool set_hardware = std::any_of(opts.overrides.begin(), opts.overrides.end(), [](const std::string& s) {
    return s.rfind("hardware=", 0) == 0 || s.rfind("hardware.", 0) == 0;
  });
  if (set_hardware && !hardware.empty())
    throw InputError("--hardware " + hardware + ": expected either --hardware or --set hardware, got both");
  HardwareRef ref;
  if (set_hardware) {
    ref = base.hardware;
  } else if (hardware.empty()) {
    std::error_code ec;
    const char* local = "configs/hardware/cpu-local.yaml";
    ref.name = std::filesystem::is_regular_file(local, ec) ? local : "cpu-local";
  } else {
    ref.name = hardware;
    ref.origin = "--hardware";
  }
  RunOptions run_opts;
  run_opts.memory_limit_bytes = parse_memory_limit(opts.memory_limit);
  const ValidateResult r =
      run_validation(base, ref, values, run_opts, progress_bar("validate"));
  emit(opts, format_validation(r, format));
  return kExitOk;
}

}  // namespace moesim::cli
