// `moesim calibrate [--out configs/hardware/cpu-local.yaml] [--name NAME] [--quick] [--note TEXT]
// [--threads N]`:
// measures this machine (src/cost/calibrate.hpp) and writes a hardware profile, atomically with --out
// (the summary then goes to stdout), else the profile to stdout and the summary to stderr.
// Covered by tests/cost/calibrate_test.cpp (through the binary).
#include <filesystem>
#include <iostream>

#include "cli/cli_common.hpp"
#include "common/error.hpp"
#include "cost/calibrate.hpp"
#include "cost/hardware_profile.hpp"
#include "report/atomic_write.hpp"

namespace moesim::cli {

int cmd_calibrate(int argc, char** argv) {
  bool help = false;
  bool quick = false;
  std::string out, name = "cpu-local", note;
  int threads = 0;
  po::options_description desc("moesim calibrate [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "out", po::value(&out), "write the profile to FILE (atomically), e.g. configs/hardware/cpu-local.yaml")(
      "name", po::value(&name)->default_value("cpu-local"), "the profile's name")(
      "quick", po::bool_switch(&quick), "small buffers and few shapes: a rough profile in about a second")(
      "note", po::value(&note), "text appended to the profile's source note (how and where it was measured)")(
      "threads", po::value(&threads)->default_value(0), "OpenMP/BLAS threads (0: all cores)");
  parse_command_line(argc, argv, desc, nullptr, 0);
  if (help) {
    std::cout << desc << "\n";
    return kExitOk;
  }
  if (name.empty() || name.find_first_of(" \t\n:/") != std::string::npos)
    throw InputError("--name: expected a profile name without spaces, ':' or '/', got '" + name + "'");
  if (!out.empty()) {
    // Refuse an unwritable destination before spending the measuring time.
    const std::filesystem::path parent = std::filesystem::absolute(out).parent_path();
    std::error_code ec;
    if (!std::filesystem::is_directory(parent, ec))
      throw InputError("--out: expected a file in an existing folder, got '" + out + "'");
  }
  apply_threads(threads);
  CalibrationOptions copts;
  copts.quick = quick;
  const CalibrationResult r = calibrate_host(copts);
  if (note.find_first_of("\n\r") != std::string::npos) throw InputError("--note: expected one line of text");
  const std::string yaml = calibration_profile_yaml(r, name, note);
  // The profile must load as written; a failure here is a bug, reported before anything is replaced.
  parse_hardware_profile(yaml, name + ".yaml");
  if (out.empty()) {
    std::cerr << calibration_summary(r);
    std::cout << yaml << std::flush;
  } else {
    write_file_atomic(out, yaml);
    std::cout << calibration_summary(r) << "wrote " << out << "\n";
  }
  return kExitOk;
}

}  // namespace moesim::cli
