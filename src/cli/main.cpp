// moesim: the command-line entry. Dispatches to one subcommand; turns every moesim::Error into one
// line on stderr and its exit code (DESIGN.md "Exit codes and errors"); never lets an exception escape.
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "src/cli/cli_common.hpp"
#include "src/cli/cmd_mpi.hpp"
#include "src/common/error.hpp"

namespace {

const char* kUsage =
    "usage: moesim <command> [options]\n"
    "\n"
    "commands:\n"
    "  run [FILE]        route, execute and cost one experiment (default: the built-in quickstart)\n"
    "  compare [FILE]    run every gating strategy (--gating all) or a list side by side\n"
    "  route --logits F  route a user's logits (.npy or .csv) and print the balance metrics\n"
    "  config [FILE]     print the effective experiment as YAML\n"
    "  hardware [NAME]   list hardware profiles, or show one with its critical batch per dtype\n"
    "  check FILE...     exit 1 when a metric breaks its expect: bound or regresses from --baseline\n"
    "  sweep [FILE]      the experiment over --vary KEY=v1,v2|1..1024*2 axes: modeled (--measure: executed) cost\n"
    "  calibrate         measure this machine and write a hardware profile (--out FILE)\n"
    "  calibrate-link    under mpirun: measure the MPI link and write it into a profile (--out FILE)\n"
    "  validate [FILE]   executed CPU pipeline vs the cost model over a batch sweep, with the error\n"
    "  report F --html O a self-contained HTML page (inline SVG) of a run/compare JSON\n"
    "\n"
    "common options: --set KEY=VALUE (repeatable), --format table|json|csv|markdown, --out FILE\n"
    "run `moesim <command> --help` for a command's options\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace moesim;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::cout << kUsage;
    return argc < 2 ? kExitBadInput : kExitOk;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::cout << "moesim " << MOESIM_VERSION << "\n";
    return kExitOk;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "run") return cli::cmd_run(argc - 1, argv + 1);
    if (cmd == "compare") return cli::cmd_compare(argc - 1, argv + 1);
    if (cmd == "route") return cli::cmd_route(argc - 1, argv + 1);
    if (cmd == "config") return cli::cmd_config(argc - 1, argv + 1);
    if (cmd == "hardware") return cli::cmd_hardware(argc - 1, argv + 1);
    if (cmd == "check") return cli::cmd_check(argc - 1, argv + 1);
    if (cmd == "sweep") return cli::cmd_sweep(argc - 1, argv + 1);
    if (cmd == "calibrate") return cli::cmd_calibrate(argc - 1, argv + 1);
    if (cmd == "calibrate-link") return cli::cmd_calibrate_link(argc - 1, argv + 1);
    if (cmd == "validate") return cli::cmd_validate(argc - 1, argv + 1);
    if (cmd == "report") return cli::cmd_report(argc - 1, argv + 1);
    std::cerr << "moesim: unknown command '" << cmd << "'; expected run, compare, route, config, hardware, check, report, sweep, calibrate or validate\n";
    return kExitBadInput;
  } catch (const Error& e) {
    std::cerr << "moesim " << cmd << ": " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::cerr << "moesim " << cmd << ": out of memory; lower the sizes or set --memory-limit\n";
    return kExitResource;
  } catch (const std::exception& e) {
    std::cerr << "moesim " << cmd << ": internal error: " << e.what() << "\n";
    return 4;
  }
}
