// `moesim run [FILE] [--set ...] [--format ...] [--out FILE]`: one experiment with its own router.
#include <iostream>

#include "src/cli/cli_common.hpp"
#include "src/cli/cmd_mpi.hpp"
#include "src/common/error.hpp"

namespace moesim::cli {

int cmd_run(int argc, char** argv) {
  CommonOptions opts;
  bool help = false;
  po::options_description desc("moesim run [FILE] [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "file", po::value(&opts.files), "experiment YAML (default: the built-in quickstart)");
  add_common_options(desc, opts, true);
  if (parse_or_help(argc, argv, desc, "file", 1, help)) return kExitOk;
  apply_threads(opts.threads);
  const ReportFormat format = parse_report_format(opts.format);
  const Experiment e = load_experiment_for(opts);
  warn_inert_keys({e}, effect_context(opts, "run"), opts.strict);
  if (run_under_mpi(e)) return cmd_run_ep(opts, e);  // expert parallel under mpirun (src/distributed)
  const RunResult run = run_experiment(e, own_variant(e), run_options(opts, "run"));
  return emit_run(opts, run, format, "run");
}

}  // namespace moesim::cli
