// `moesim validate [FILE] [--batches 1..4096*2] [--hardware cpu-local|FILE] [--format table|csv|json]`:
// the executed CPU pipeline over a batch sweep against the cost model on a host profile, per point and
// as a median absolute percentage error (src/sweep/validate.hpp). The default profile is
// configs/hardware/cpu-local.yaml under the current folder when it exists (a fresh calibration), else
// the built-in cpu-local; when that profile was measured on another machine (its `machine:` signature:
// CPU model, cores, BLAS core, threads), this machine's own calibration from the per-user cache
// ($XDG_CACHE_HOME/moesim or ~/.cache/moesim), measured afresh when there is none.
// `moesim validate --published [all|FILE|DIR] [--column C] [--max-median-error X]`: the published GPU kernel,
// communication and training-step tables against the cost model (src/sweep/published.hpp, published_comm.hpp,
// published_train.hpp); exit 1 when column C's median error exceeds X.
// Covered by tests/sweep/validate_test.cpp (through the binary).
#include <algorithm>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <iostream>

#include "src/cli/cli_common.hpp"
#include "src/common/error.hpp"
#include "src/common/digest.hpp"
#include "src/common/host.hpp"
#include "src/report/provenance.hpp"
#include "src/cost/calibrate.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/report/atomic_write.hpp"
#include "src/sweep/sweep.hpp"
#include "src/sweep/published.hpp"
#include "src/sweep/published_comm.hpp"
#include "src/sweep/published_step.hpp"
#include "src/report/step_validation_report.hpp"
#include "src/report/serve_validation_report.hpp"
#include "src/sweep/published_serve.hpp"
#include "src/sweep/validate.hpp"
#include "src/report/validate_report.hpp"
#include "src/report/train_validation_report.hpp"
#include "src/sweep/published_train.hpp"

namespace moesim::cli {
namespace {

// "0.25" or "25%": a fraction in [0, 10].
double parse_fraction_option(const std::string& option, const std::string& text) {
  std::string digits = text;
  double scale = 1.0;
  if (!digits.empty() && digits.back() == '%') {
    digits.pop_back();
    scale = 0.01;
  }
  std::size_t used = 0;
  double v = -1;
  try {
    v = std::stod(digits, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != digits.size() || !(v * scale >= 0) || v * scale > 10)
    throw InputError(option + ": expected a fraction such as 0.25 or a percentage such as 25%, got '" + text + "'");
  return v * scale;
}

// The per-user cache of fresh host calibrations: $XDG_CACHE_HOME/moesim, else $HOME/.cache/moesim.
std::filesystem::path calibration_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::filesystem::path(xdg) / "moesim";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::filesystem::path(home) / ".cache" / "moesim";
  throw InputError("validate: expected XDG_CACHE_HOME or HOME for the calibration cache, got neither; pass --hardware");
}

// The default host profile when it belongs to this machine; otherwise this machine's own calibration
// from the per-user cache, measured afresh (and cached) when there is none. Never writes over the
// tracked configs/hardware/cpu-local.yaml. Says on stderr which profile it took and why.
HardwareRef profile_for_this_machine(const HardwareRef& def) {
  const HardwareProfile profile = load_hardware_profile(def, "");
  const MachineSignature here = this_machine(openmp_max_threads());
  if (profile.machine && *profile.machine == here) return def;
  const std::string was = profile.machine ? describe(*profile.machine) : "an unrecorded machine";
  const std::string id = bytes_digest(describe(here));
  const std::filesystem::path path = calibration_cache_dir() / ("cpu-local-" + id.substr(id.find(':') + 1) + ".yaml");
  HardwareRef mine;
  mine.name = path.string();
  mine.origin = "the calibration cache";
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    try {
      const HardwareProfile cached = load_hardware_profile(mine, "");
      if (cached.machine && *cached.machine == here) {
        std::cerr << "moesim: validate: " << def.name << " was measured on " << was << "; this machine ("
                  << describe(here) << ") has its own calibration: " << path.string() << "\n";
        return mine;
      }
    } catch (const Error&) {
      // A damaged cache entry is measured again below.
    }
  }
  std::cerr << "moesim: validate: " << def.name << " was measured on " << was << ", not on this machine ("
            << describe(here) << "): calibrating it afresh into " << path.string() << "\n";
  const CalibrationResult r = calibrate_host(CalibrationOptions{});
  const std::string problem = calibration_problem(r);
  const std::string yaml = calibration_profile_yaml(r, "cpu-local", "validate's calibration of this machine");
  if (!problem.empty()) {
    // Not cached: the next run measures again. This run uses it, and says what it is worth.
    std::cerr << "moesim: validate: the fresh calibration is not cached: " << problem
              << "; the errors below describe a loaded machine\n";
    mine.name.clear();
    mine.inline_yaml = yaml;
    mine.origin = "validate's calibration";
    return mine;
  }
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) throw InputError(path.parent_path().string() + ": cannot create the calibration cache: " + ec.message());
  write_file_atomic(path.string(), yaml);
  return mine;
}

}  // namespace

int cmd_validate(int argc, char** argv) {
  CommonOptions opts;
  bool help = false;
  std::string batches = "1..4096*2", hardware, published, column_text, max_median_text;
  po::options_description desc("moesim validate [FILE] [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "file", po::value(&opts.files), "experiment YAML (default: the built-in quickstart); its execute: size is validated")(
      "batches", po::value(&batches)->default_value("1..4096*2"), "batch sizes: values and ranges as in sweep --vary")(
      "hardware", po::value(&hardware),
      "host profile: a name or file (default: ./configs/hardware/cpu-local.yaml if present, else built-in cpu-local); "
      "--set hardware=NAME|FILE does the same")(
      "memory-limit", po::value(&opts.memory_limit), "refuse points whose memory estimate exceeds this (e.g. 4GiB)")(
      "published", po::value(&published)->implicit_value("all"),
      "instead: published GPU kernel and dispatch/combine tables against the cost model: all (built in), a "
      "validation CSV or a folder")(
      "column", po::value(&column_text),
      "with --published: the column --max-median-error holds: ideal|model|held_out (default held_out)")(
      "max-median-error", po::value(&max_median_text),
      "with --published: exit 1 when the column's overall median |error| exceeds this (0.25 or 25%), the kernel, "
      "the communication and the training tables each");
  add_common_options(desc, opts, false);
  if (parse_or_help(argc, argv, desc, "file", 1, help)) return kExitOk;
  apply_threads(opts.threads);
  const ReportFormat format = parse_report_format(opts.format);
  // `--published all` and `--published FILE`: an option with an implicit value leaves the next word to the
  // positional argument, so take it back from there.
  if (published == "all" && opts.files.size() == 1) {
    published = opts.files.front();
    opts.files.clear();
  }
  if (published.empty()) {
    if (!max_median_text.empty()) throw InputError("--max-median-error: expected with --published only");
    if (!column_text.empty()) throw InputError("--column: expected with --published only");
  } else {
    if (!opts.files.empty() || !opts.overrides.empty() || !hardware.empty() || !opts.memory_limit.empty() ||
        batches != "1..4096*2")
      throw InputError("--published: expected without an experiment, --set, --hardware, --batches or --memory-limit "
                       "(each table names its GPU and shapes)");
    if (column_text.empty()) column_text = "held_out";
    std::optional<PublishedColumn> column;
    for (PublishedColumn c : kPublishedColumns)
      if (column_text == to_string(c)) column = c;
    if (!column) throw InputError("--column: expected ideal, model or held_out, got '" + column_text + "'");
    // Every option is checked before the tables are modeled.
    const bool gate = !max_median_text.empty();
    const double limit = gate ? parse_fraction_option("--max-median-error", max_median_text) : 0.0;
    const std::vector<PublishedTable> kernel_tables = load_published(published);
    const std::vector<CommTable> comm_tables = load_published_comm(published);
    const std::vector<TrainingTable> training_tables = load_training_tables(published);
    const std::vector<StepTable> step_tables = load_step_tables(published);
    const std::vector<ServeTable> serve_tables = load_serve_tables(published);
    if (kernel_tables.empty() && comm_tables.empty() && training_tables.empty() && step_tables.empty() &&
        serve_tables.empty())
      throw InputError("--published " + published + ": expected at least one table, got none");
    if (gate && *column == PublishedColumn::ideal && kernel_tables.empty())
      throw InputError("--column ideal: the communication and training tables have no ideal column; expected model or "
                       "held_out");
    std::optional<PublishedValidation> v;
    std::optional<CommValidation> cv;
    std::optional<TrainingValidation> tv;
    if (!kernel_tables.empty()) v = validate_published(kernel_tables);
    if (!comm_tables.empty()) cv = validate_comm(comm_tables);
    if (!training_tables.empty()) tv = validate_training(training_tables);
    std::optional<StepValidation> sv;
    if (!step_tables.empty()) sv = validate_steps(step_tables);
    std::optional<ServeValidation> rv;
    if (!serve_tables.empty()) rv = validate_serving(serve_tables);
    std::string text;
    if (!tv && !sv && !rv) {
      text = format_published(v ? &*v : nullptr, cv ? &*cv : nullptr, format);
    } else if (format == ReportFormat::json) {
      // The training tables' report is the `training` key beside the others'.
      nlohmann::json j = v || cv ? nlohmann::json::parse(format_published(v ? &*v : nullptr, cv ? &*cv : nullptr, format))
                                 : nlohmann::json{{"schema_version", kReportSchemaVersion},
                                                  {"moesim_version", MOESIM_VERSION},
                                                  {"provenance", provenance_json()}};
      if (tv) j["training"] = training_validation_json(*tv);
      if (sv) j["serving_step"] = step_validation_json(*sv);
      if (rv) j["serving"] = serve_validation_json(*rv);
      text = j.dump(2) + "\n";
    } else {
      // Text: the kernel tables, the training tables, then the communication tables, each section (csv: each set of
      // rows under its own header) after a blank line.
      for (const std::string& part : {v ? format_published(&*v, nullptr, format) : std::string(),
                                      tv ? format_training_validation(*tv, format) : std::string(),
                                      sv ? format_step_validation(*sv, format) : std::string(),
                                      rv ? format_serve_validation(*rv, format) : std::string(),
                                      cv ? format_published(nullptr, &*cv, format) : std::string()})
        if (!part.empty()) text += (text.empty() ? "" : "\n") + part;
    }
    emit(opts, text);
    if (gate) {
      // Each kind of table is held to the limit on its own: kernel times and all-to-all times.
      std::vector<std::pair<std::string, ErrorSummary>> held;
      if (v) held.push_back({"kernel tables'", v->overall[static_cast<int>(*column)]});
      if (cv && *column != PublishedColumn::ideal)
        held.push_back({"communication tables'", *column == PublishedColumn::model ? cv->model : cv->held_out});
      if (tv && *column != PublishedColumn::ideal)
        held.push_back({"training tables'", *column == PublishedColumn::model ? tv->model : tv->held_out});
      if (sv && *column != PublishedColumn::ideal)
        held.push_back({"serving-step tables'", *column == PublishedColumn::model ? sv->model : sv->held_out});
      if (rv && *column != PublishedColumn::ideal) held.push_back({"serving tables'", rv->model});
      bool failed = false;
      for (const auto& [what, e] : held) {
        if (e.points == 0) throw InputError("--column " + column_text + ": no point has that column");
        if (e.median_abs > limit) {
          std::cerr << "moesim: validate --published: the " << what << " " << column_text << " column's median |error| "
                    << e.median_abs * 100 << "% exceeds --max-median-error " << limit * 100 << "%\n";
          failed = true;
        }
      }
      if (failed) return kExitCheckFailed;
    }
    return kExitOk;
  }
  const std::vector<std::string> values = expand_sweep_values(batches, "--batches " + batches);
  const Experiment base = load_experiment_for(opts);
  warn_inert_keys({base}, {"validate", true, false}, opts.strict);
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
    ref = profile_for_this_machine(ref);
  } else {
    ref.name = hardware;
    ref.origin = "--hardware";
  }
  if (set_hardware || !hardware.empty()) {
    // A measured CPU profile named explicitly is used as asked, with a word when it is another machine's
    // (a profile that does not load here is reported by run_validation, which resolves it fully). The
    // default profile was settled by profile_for_this_machine above.
    try {
      const HardwareProfile chosen = load_hardware_profile(ref, base.source_file);
      const MachineSignature here = this_machine(openmp_max_threads());
      if (chosen.machine && *chosen.machine != here)
        std::cerr << "moesim: validate: " << (ref.name.empty() ? chosen.name : ref.name) << " was measured on "
                  << describe(*chosen.machine) << ", not on this machine (" << describe(here)
                  << "): its predictions describe that machine\n";
    } catch (const Error&) {
    }
  }
  RunOptions run_opts;
  run_opts.memory_limit_bytes = parse_memory_limit(opts.memory_limit);
  const ValidateResult r =
      run_validation(base, ref, values, run_opts, progress_bar("validate"));
  emit(opts, format_validation(r, format));
  return kExitOk;
}

}  // namespace moesim::cli
