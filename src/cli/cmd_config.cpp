// `moesim config [FILE] [--set ...]`: prints the effective experiment as YAML (it loads back equal, and
// runs from any folder: a workload.path found beside the experiment file is printed absolute).
// `moesim config --explain [--format markdown]`: every key and the settings under which it acts.
#include <filesystem>
#include <iostream>

#include "src/cli/cli_common.hpp"
#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/pipeline/run_experiment.hpp"

namespace moesim::cli {

int cmd_config(int argc, char** argv) {
  CommonOptions opts;
  bool help = false, explain = false;
  po::options_description desc("moesim config [FILE] [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "file", po::value(&opts.files), "experiment YAML (default: the built-in quickstart)")(
      "set", po::value(&opts.overrides)->composing(), "override a config key (repeatable)")(
      "out", po::value(&opts.out), "write the YAML to FILE (atomically) instead of stdout")(
      "explain", po::bool_switch(&explain), "print every key and the settings under which it acts, instead")(
      "format", po::value(&opts.format)->default_value("table"), "with --explain: table | markdown");
  if (parse_or_help(argc, argv, desc, "file", 1, help)) return kExitOk;
  if (explain) {
    if (opts.format != "table" && opts.format != "markdown")
      throw InputError("--format: expected table or markdown with --explain, got '" + opts.format + "'");
    if (!opts.files.empty() || !opts.overrides.empty())
      throw InputError("--explain: expected no experiment and no --set (the table holds for every experiment)");
    emit(opts, explain_key_effects(opts.format == "markdown"));
    return kExitOk;
  }
  if (opts.format != "table") throw InputError("--format: only with --explain (config prints YAML)");
  Experiment e = load_experiment_for(opts);
  // A workload.path relative to the experiment's folder is printed absolute, so that the YAML runs the
  // same from any folder and wherever it is saved.
  if (!e.workload.path.empty()) {
    const std::filesystem::path resolved(resolve_workload_path(e));
    std::error_code ec;
    if (std::filesystem::exists(resolved, ec)) e.workload.path = std::filesystem::absolute(resolved).lexically_normal().string();
  }
  emit(opts, experiment_to_yaml(e));
  return kExitOk;
}

}  // namespace moesim::cli
