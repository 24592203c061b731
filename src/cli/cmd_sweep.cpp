// `moesim sweep [FILE] --vary KEY=v1,v2|START..END*F [--vary ...] [--measure] [--format table|json|csv|markdown]
// [--out FILE]`: the experiment at every point of the cartesian product of the --vary axes (any config
// key), modeled (and executed with --measure). A progress bar goes to stderr only when stderr is a
// terminal. Covered by tests/sweep/run_sweep_test.cpp (through the binary).
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "src/cli/cli_common.hpp"
#include "src/common/error.hpp"
#include "src/sweep/run_sweep.hpp"
#include "src/sweep/sweep.hpp"
#include "src/report/sweep_report.hpp"

namespace moesim::cli {
int cmd_sweep(int argc, char** argv) {
  CommonOptions opts;
  bool help = false;
  bool measure = false, no_execute = false;
  std::vector<std::string> varies;
  po::options_description desc(
      "moesim sweep [FILE] --vary KEY=VALUES [--vary KEY2=VALUES] [options]\n"
      "VALUES: a comma list of values and ranges: 1..1024*2 (powers of two), 0..1+0.25 (step), 1..8 (step 1)");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "file", po::value(&opts.files), "experiment YAML (default: the built-in quickstart)")(
      "vary", po::value(&varies)->composing(), "an axis: --vary workload.batch=1..4096*2 (repeatable; cartesian product)")(
      "measure", po::bool_switch(&measure), "also run the executed CPU pipeline at each point (measured columns)")(
      "no-execute", po::bool_switch(&no_execute), "model only (the default here), as run --no-execute")(
      "memory-limit", po::value(&opts.memory_limit), "refuse points whose memory estimate exceeds this (e.g. 4GiB)")(
      "wide", po::bool_switch(&opts.wide),
      "table: every column (by default the table keeps to 120 characters and names the columns it leaves out)");
  add_common_options(desc, opts, false);
  if (parse_or_help(argc, argv, desc, "file", 1, help)) return kExitOk;
  if (varies.empty()) throw InputError("sweep: expected at least one --vary KEY=VALUES");
  if (measure && no_execute)
    throw InputError("--measure, --no-execute: expected one of them (--measure runs the executed pipeline, "
                     "--no-execute models only), got both");
  apply_threads(opts.threads);
  const ReportFormat format = parse_report_format(opts.format);
  if (opts.wide && format != ReportFormat::table)
    throw InputError("--wide: expected together with --format table (csv, json and markdown have every column), got "
                     "--format " + opts.format);
  const std::vector<SweepAxis> axes = parse_varies(varies);
  const Experiment base = load_experiment_for(opts);
  SweepOptions sweep_opts;
  sweep_opts.measure = measure;
  sweep_opts.memory_limit_bytes = parse_memory_limit(opts.memory_limit);
  sweep_opts.progress = progress_bar("sweep");
  sweep_opts.before_run = [&](const std::vector<Experiment>& points) {
    EffectContext ctx = effect_context(opts, "sweep", base);
    ctx.executes = measure;
    ctx.cuda = false;  // sweep --measure executes on the CPU
    warn_inert_keys(points, ctx, opts.strict);
  };
  const SweepResult result = run_sweep(base, axes, sweep_opts);
  emit(opts, format_sweep(result, format, opts.wide));
  return kExitOk;
}

}  // namespace moesim::cli
