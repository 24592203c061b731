// `moesim run [FILE] [--set ...] [--format ...] [--out FILE] [--records] [--dump-routing FILE [--dump-logits]]`: one
// experiment with its own router; --dump-routing writes every routing it made as a trace that
// workload.source trace replays (docs/workloads.md "Trace format"). Covered by tests/cli/dump_routing_test.cpp.
#include <iostream>

#include "src/cli/cli_common.hpp"
#include "src/cli/cmd_mpi.hpp"
#include "src/common/error.hpp"

namespace moesim::cli {

int cmd_run(int argc, char** argv) {
  CommonOptions opts;
  bool help = false, dump_given = false, dump_logits = false;
  std::string dump_path;
  po::options_description desc("moesim run [FILE] [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "file", po::value(&opts.files), "experiment YAML (default: the built-in quickstart)");
  add_dump_options(desc, dump_path, dump_given, dump_logits,
                   "write every routing of the run (each batch; decoder: every step and MoE layer; trace: as "
                   "replayed) as a trace, JSON Lines, that workload.source trace replays to the same loads, drops "
                   "and modeled times; written atomically (not for load_profile or load_distribution)");
  add_common_options(desc, opts, true, true);
  if (parse_or_help(argc, argv, desc, "file", 1, help)) return kExitOk;
  opts.no_execute = !executes(opts, true);
  apply_threads(opts.threads);
  const ReportFormat format = parse_report_format(opts.format);
  const Experiment e = load_experiment_for(opts);
  check_records_option(opts, e, format);
  if (dump_given && (e.workload.source == WorkloadSource::load_profile ||
                    e.workload.source == WorkloadSource::load_distribution)) {
    throw InputError(std::string("--dump-routing: workload.source ") + to_string(e.workload.source) +
                     " holds per-expert counts, not per-token routing: expected synthetic, logits, decoder or trace");
  }
  EffectContext ctx = effect_context(opts, "run", e);
  ctx.dumps_routing = dump_given;
  warn_inert_keys({e}, ctx, opts.strict);
  if (run_under_mpi(e)) {
    if (opts.records) throw InputError("--records: expected a run without mpirun (an expert-parallel run has no step records)");
    if (dump_given) throw InputError("--dump-routing: expected a run without mpirun (each rank routes its own tokens)");
    return cmd_run_ep(opts, e);  // expert parallel under mpirun (src/distributed)
  }
  RoutingDump dump(dump_given, dump_path, dump_logits, true);
  std::unique_ptr<RecordSpool> spool;
  RunOptions run_opts = run_options(opts, "run", &spool);
  if (dump.on()) run_opts.routing_sink = [&dump](const RoutedBatch& b) { dump.write(b); };
  const RunResult run = run_experiment(e, own_variant(e), run_opts);
  dump.commit();
  return emit_run(opts, run, format, "run", spool.get());
}

}  // namespace moesim::cli
