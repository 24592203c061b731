// `moesim config [FILE] [--set ...]`: prints the effective experiment as YAML (it loads back equal).
#include <iostream>

#include "src/cli/cli_common.hpp"
#include "src/common/error.hpp"
#include "src/config/load_config.hpp"

namespace moesim::cli {

int cmd_config(int argc, char** argv) {
  CommonOptions opts;
  bool help = false;
  po::options_description desc("moesim config [FILE] [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "file", po::value(&opts.files), "experiment YAML (default: the built-in quickstart)")(
      "set", po::value(&opts.overrides)->composing(), "override a config key (repeatable)")(
      "out", po::value(&opts.out), "write the YAML to FILE (atomically) instead of stdout");
  parse_command_line(argc, argv, desc, "file", 1);
  if (help) {
    std::cout << desc << "\n";
    return kExitOk;
  }
  emit(opts, experiment_to_yaml(load_experiment_for(opts)));
  return kExitOk;
}

}  // namespace moesim::cli
