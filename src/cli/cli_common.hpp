// Pieces every subcommand shares: the common options (--set, --format, --out, --memory-limit,
// --verify, --no-execute, --threads), loading the experiment (a file or the built-in default) and
// emitting a report to stdout or atomically to --out. Host only. Covered by tests/cli/cli_test.cpp.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <boost/program_options.hpp>

#include "src/config/experiment.hpp"
#include "src/config/key_effects.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "src/report/atomic_write.hpp"
#include "src/report/record_spool.hpp"
#include "src/report/report.hpp"

namespace moesim::cli {

namespace po = boost::program_options;

struct CommonOptions {
  std::vector<std::string> files;       // positional experiment files
  std::vector<std::string> overrides;   // --set KEY=VALUE, in order
  std::string format = "table";
  std::string out;                      // --out FILE ("" = stdout)
  std::string memory_limit = "";        // --memory-limit, e.g. 4GiB ("" = 75% of physical memory)
  bool verify = false;
  bool no_execute = false;
  int threads = 0;                      // --threads N (0 = OpenMP default)
  std::string backend = "auto";         // --backend auto|cpu|cuda
  int repeats = 0;                      // --repeats R: execute.repeats (0 = the experiment's own)
  bool strict = false;                  // --strict: a key set to no effect is an error (exit 2)
  bool records = false;                 // --records (run, compare): list every step record in the report
  bool wide = false;                    // --wide (run, compare): every column in the table, past 120 characters
  bool explain = false;                 // --explain (run, compare): every column defined, after the table
  bool measure = false;                 // --measure (run, compare, sweep): run the executed CPU pipeline too
};

// --records acts on the json report of a step-structured run (decoder, trace, load_profile) only: anywhere
// else it would be accepted and ignored, so it is an InputError (exit 2) naming what it needs.
void check_records_option(const CommonOptions& opts, const Experiment& e, ReportFormat format);

// Adds the common options to `desc`, storing into `opts`. `with_execute` (run, compare): also --memory-limit,
// --verify, --records, --no-execute, --measure, --wide, --explain, --backend, --repeats; `executes_by_default`
// says which of --measure and --no-execute is the default (run: executes; compare: models), and the other
// one the choice (executes() resolves them; given both, it is an InputError).
void add_common_options(po::options_description& desc, CommonOptions& opts, bool with_execute,
                        bool executes_by_default = true);

// Whether the command runs the executed CPU pipeline: --measure or --verify (which checks it), --no-execute, else
// its default. Throws InputError naming both flags when --no-execute is given with --measure or --verify.
bool executes(const CommonOptions& opts, bool executes_by_default);

// Parses argv (after the subcommand name) into the variables bound in `desc`; throws InputError on
// unknown options or bad values. `positional` names the option that takes positional arguments.
void parse_command_line(int argc, char** argv, const po::options_description& desc, const char* positional,
                        int max_positional);

// An experiment given as text rather than a file: the Python module's moesim.run({...}) sets it (under its
// lock) around a command, and load_experiment_for then loads it where no positional file was given, in place
// of the built-in default. `source_name` stands for the file in messages; relative paths in it resolve from
// the current folder. Unset (the binary): no effect.
struct InlineExperiment {
  std::string yaml_text;
  std::string source_name;
};
extern const InlineExperiment* inline_experiment;

// The experiment from the first positional file, the inline experiment, or the built-in default, with --set
// applied, then --repeats (as execute.repeats). Throws InputError for --repeats < 0.
Experiment load_experiment_for(const CommonOptions& opts, size_t file_index = 0);

// The YAML text of a hardware profile named by --base: a file (validated, errors name it and the key),
// else a built-in profile name (moesim hardware); otherwise InputError naming --base.
std::string base_profile_text(const std::string& base);

// Bytes from a size text: "4GiB", "512MiB", "1e9" (bytes). Throws InputError naming --memory-limit.
double parse_memory_limit(const std::string& text);

// Writes the report of `run` (stdout or --out, atomically), then returns kExitCheckFailed, naming the first
// strategy whose --verify disagreed on stderr ("moesim COMMAND: --verify: ..."), or kExitOk. `spool`: the
// records --records spooled (run_options), written into the json report in their place.
int emit_run(const CommonOptions& opts, const RunResult& run, ReportFormat format, const char* command,
             const RecordSpool* spool = nullptr);

// The run options of the common flags; a progress bar labelled `progress_label` when stderr is a terminal.
// With --records and a `spool` to fill, the records go to a new spool as they are made (RunOptions::record_sink)
// instead of being kept, for emit_run; without `spool`, --records keeps them (RunOptions::records).
RunOptions run_options(const CommonOptions& opts, const std::string& progress_label,
                       std::unique_ptr<RecordSpool>* spool = nullptr);

// --backend: cpu; cuda (throws ResourceError, exit 3, when no CUDA device is usable or the CUDA backend
// was not built); auto (cuda when a device is usable, else cpu). Other names throw InputError.
ExecBackend resolve_backend(const std::string& name);

// parse_command_line, then, when --help was given (`help`, bound in desc), prints desc: every
// subcommand's preamble. True when the command should return kExitOk without running.
bool parse_or_help(int argc, char** argv, const po::options_description& desc, const char* positional,
                   int max_positional, const bool& help);

// Applies --threads to OpenMP and OpenBLAS.
void apply_threads(int threads);

// A progress bar on stderr ("LABEL [#####.....] done/total"), cleared when done; empty (no output)
// when stderr is not a terminal, so logs and pipes stay quiet.
std::function<void(size_t, size_t)> progress_bar(const std::string& label);

// One stderr line per key the user set (file, --set, --vary) to a value that acts in none of `rows` (the
// experiments of a run: one per row or point), "moesim: KEY has no effect REASON"; under --strict the
// first such key is a ConfigError (exit 2) instead.
void warn_inert_keys(const std::vector<Experiment>& rows, const EffectContext& ctx, bool strict);

// A seam for tests/cli/key_effects_cli_test.cpp: while set, warn_inert_keys hands the command's inert keys to
// it and throws KeysChecked instead of warning, so a command's warnings are known without running it. Unset
// (the binary): no effect.
struct KeysChecked {};
extern std::function<void(const std::vector<InertKey>&)> inert_keys_observer;

// What a command does beyond its experiment (--no-execute, --backend; a trace without logits replays), for
// warn_inert_keys.
EffectContext effect_context(const CommonOptions& opts, const char* command, const Experiment& e);

// The experiment of each variant: `e` with the variant's router.
std::vector<Experiment> variant_experiments(const Experiment& e, const std::vector<RouterVariant>& variants);

// A command that turns its own flags into --set overrides (plan --devices D, route --top-k K) loads its experiment
// through this: an error about one of those overrides names the flag the user typed ("--devices 3"), not the
// --set the command made ("--set placement.devices=3"). `flags`: each override with the flag text it came from.
Experiment load_with_flags(const std::vector<std::string>& overrides,
                           const std::vector<std::pair<std::string, std::string>>& flags);

// Writes `text` to --out atomically, or to stdout.
void emit(const CommonOptions& opts, const std::string& text);

// compare's rows: each strategy of `gating_list` ("" = the experiment's, "all", or a comma list)
// times the cartesian product of the --vary router.KEY=v1,v2 axes.
std::vector<RouterVariant> compare_variants(const Experiment& base, const std::string& gating_list,
                                            const std::vector<std::string>& varies);

// --dump-routing FILE [--dump-logits] of `route` and `run`: every routing streamed, batch by batch, as
// trace lines (format_trace_lines, docs/workloads.md "Trace format") into a temporary file that commit()
// renames over FILE; destroyed without commit (a failed run), nothing is left. Off when no path was given.
class RoutingDump {
 public:
  // require_top_k: refuse (InputError naming --dump-routing) a routing whose tokens do not each have
  // top_k assignments when logits are not written, since a trace without logits replays only that.
  RoutingDump(bool given, const std::string& path, bool with_logits, bool require_top_k);
  bool on() const { return out_ != nullptr; }
  void write(const RoutedBatch& b);
  void commit();

 private:
  std::unique_ptr<AtomicFileWriter> out_;
  bool with_logits_ = false;
  bool require_top_k_ = false;
};

// The --dump-routing and --dump-logits options, bound to the variables given.
void add_dump_options(po::options_description& desc, std::string& path, bool& given, bool& with_logits,
                      const char* what);

// A --vary key of a command that routes once and costs every point (step, serve --search) must leave the routing as
// it is: a placement.* or hardware key, but for those that set the loads EPLB plans from (plan_from, plan_profile,
// warmup_batches); otherwise an InputError naming the key.
void check_route_once_key(const std::string& key, const std::string& command);

// The lines of a table report's first block (up to its first blank line): the header an HTML page repeats.
std::vector<std::string> header_lines(const std::string& table);

// Subcommands: each returns the process exit code.
int cmd_run(int argc, char** argv);
int cmd_compare(int argc, char** argv);
int cmd_config(int argc, char** argv);
int cmd_route(int argc, char** argv);
int cmd_hardware(int argc, char** argv);
int cmd_check(int argc, char** argv);
int cmd_sweep(int argc, char** argv);
int cmd_calibrate(int argc, char** argv);
int cmd_validate(int argc, char** argv);
int cmd_report(int argc, char** argv);
int cmd_import(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_step(int argc, char** argv);
int cmd_serve(int argc, char** argv);

}  // namespace moesim::cli
