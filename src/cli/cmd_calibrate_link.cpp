// `mpirun -np D moesim calibrate-link [--base PROFILE] [--out FILE] [--name NAME] [--quick]`: measures
// MPI_Alltoallv between the ranks (src/distributed/link_calibration.hpp) and writes a hardware profile:
// the base profile (a file or a built-in name; without --base, `moesim calibrate` runs first on rank 0)
// with link_bandwidth_gbs and link_latency_us measured here. Rank 0 writes; the summary goes to stdout
// (stderr when the profile goes to stdout). Covered by the CTest mpi.calibrate_link.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "src/cli/cmd_mpi.hpp"
#include "src/common/embedded.hpp"
#include "src/common/error.hpp"
#include "src/cost/calibrate.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/distributed/ep_layer.hpp"
#include "src/distributed/link_calibration.hpp"
#include "src/report/atomic_write.hpp"

namespace moesim::cli {

int cmd_calibrate_link(int argc, char** argv) {
  bool help = false, quick = false;
  std::string out, base, name;
  int threads = 0;
  po::options_description desc("mpirun -np D moesim calibrate-link [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "base", po::value(&base), "profile to extend: a file (e.g. from `moesim calibrate --out`) or a built-in name; "
                                "default: run `moesim calibrate` first")(
      "out", po::value(&out), "write the profile to FILE (atomically); default stdout")(
      "name", po::value(&name), "the profile's name (default: the base's name, or cpu-local)")(
      "quick", po::bool_switch(&quick), "fewer sizes and repeats (and a quick host calibration without --base)")(
      "threads", po::value(&threads)->default_value(0), "OpenMP/BLAS threads of the host calibration (0: all cores)");
  if (parse_or_help(argc, argv, desc, nullptr, 0, help)) return kExitOk;
  if (!ep_launched_by_mpirun()) {
    throw InputError("calibrate-link measures the link between MPI ranks: run it as `mpirun -np 2 moesim "
                     "calibrate-link ...` (as root add --allow-run-as-root)");
  }
  ep_mpi_init();
  try {
    std::string base_yaml;
    ep_agree("moesim calibrate-link", [&] {
      if (!name.empty() && name.find_first_of(" \t\n:/") != std::string::npos)
        throw InputError("--name: expected a profile name without spaces, ':' or '/', got '" + name + "'");
      if (!base.empty()) base_yaml = base_profile_text(base);
      if (ep_num_ranks() < 2) {
        throw InputError("calibrate-link measures MPI_Alltoallv between ranks: run it under mpirun -np 2 or more "
                         "(this job has 1 rank)");
      }
    });
    std::string host_summary;
    if (base.empty()) {
      // Rank 0 measures the host; the others wait in ep_agree, which sleeps between polls (no spinning on its cores).
      ep_agree("moesim calibrate-link", [&] {
        if (ep_rank() == 0) {
          apply_threads(threads);
          CalibrationOptions copts;
          copts.quick = quick;
          const CalibrationResult host = calibrate_host(copts);
          base_yaml = calibration_profile_yaml(host, name.empty() ? "cpu-local" : name);
          host_summary = calibration_summary(host);
        }
      });
    }
    const LinkCalibration link = calibrate_link(LinkCalibrationOptions{quick});
    if (ep_rank() == 0) {
      ep_agree("moesim calibrate-link", [&] {
        std::string profile_name = name;
        if (profile_name.empty()) {
          const HardwareProfile b = parse_hardware_profile(base_yaml, base.empty() ? "calibration" : base);
          profile_name = b.name.empty() ? "cpu-local" : b.name;
        }
        const std::string yaml = link_profile_yaml(link, base_yaml, profile_name);
        parse_hardware_profile(yaml, profile_name + ".yaml");  // must load as written
        std::ostream& summary = out.empty() ? std::cerr : std::cout;
        summary << host_summary << link_summary(link);
        if (out.empty()) {
          std::cout << yaml << std::flush;
        } else {
          write_file_atomic(out, yaml);
          summary << "wrote " << out << "\n";
        }
      });
    } else {
      ep_agree("moesim calibrate-link", [] {});
    }
    return kExitOk;
  } catch (const Error& err) {
    ep_abort(err.exit_code(), "moesim calibrate-link", err.what());
  } catch (const std::exception& err) {
    ep_abort(4, "moesim calibrate-link", std::string("internal error: ") + err.what());
  }
}

}  // namespace moesim::cli
