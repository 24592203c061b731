// `moesim compare [FILE] [--gating a,b,c|all] [--vary KEY=v1,v2] [--measure] ...`: the same experiment (same
// logits, same seed) under each strategy and variant, one row each, modeled (--measure: executed too). On a trace without logits --gating is
// refused (exit 2): the rows replay the recorded routing (--vary of capacity keys still applies).
#include <iostream>
#include <sstream>

#include "src/cli/cli_common.hpp"
#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/workload/trace_replay.hpp"

namespace moesim::cli {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

std::vector<RouterVariant> compare_variants(const Experiment& base, const std::string& gating_list,
                                            const std::vector<std::string>& varies) {
  std::vector<Gating> gatings;
  if (gating_list.empty()) {
    gatings.push_back(base.router.gating);
  } else if (gating_list == "all") {
    gatings = all_gatings();
  } else {
    for (const std::string& g : split(gating_list, ',')) {
      const auto parsed = parse_gating(g);
      if (!parsed) {
        std::string known;
        for (Gating x : all_gatings()) known += std::string(known.empty() ? "" : ", ") + to_string(x);
        throw InputError("--gating: unknown strategy '" + g + "'; expected all or a list of: " + known);
      }
      gatings.push_back(*parsed);
    }
  }
  // Each --vary KEY=v1,v2 multiplies the rows; values are applied as --set router overrides.
  std::vector<std::vector<std::string>> axes;
  for (const std::string& v : varies) {
    const auto eq = v.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
      throw InputError("--vary: expected KEY=v1,v2,..., got '" + v + "'");
    std::vector<std::string> settings;
    for (const std::string& value : split(v.substr(eq + 1), ',')) settings.push_back(v.substr(0, eq) + "=" + value);
    axes.push_back(settings);
  }
  std::vector<std::vector<std::string>> combos = {{}};
  for (const auto& axis : axes) {
    std::vector<std::vector<std::string>> next;
    for (const auto& c : combos)
      for (const auto& s : axis) {
        auto n = c;
        n.push_back(s);
        next.push_back(n);
      }
    combos = next;
  }
  std::vector<RouterVariant> variants;
  for (Gating g : gatings) {
    for (const auto& combo : combos) {
      Experiment e = base;
      // Through the override path, so that the keys a strategy reads are validated for it.
      try {
        apply_override(e, std::string("router.gating=") + to_string(g));
      } catch (const ConfigError& ex) {
        throw ConfigError(std::string("--gating ") + to_string(g) + ": " + ex.what());
      }
      std::string label = to_string(g);
      for (const std::string& s : combo) {
        if (s.rfind("router.", 0) != 0)
          throw InputError("--vary " + s + ": only router.* keys vary between rows; use sweep for other keys");
        apply_override(e, s);
        label += " " + s.substr(7);
      }
      variants.push_back({label, e.router});
    }
  }
  return variants;
}

int cmd_compare(int argc, char** argv) {
  CommonOptions opts;
  bool help = false;
  std::string gating;
  std::vector<std::string> varies;
  po::options_description desc("moesim compare [FILE] [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "file", po::value(&opts.files), "experiment YAML (default: the built-in quickstart)")(
      "gating", po::value(&gating), "strategies: all, or a comma list (default: the experiment's; refused on a trace without logits, "
      "which is only replayed as recorded)")(
      "vary", po::value(&varies)->composing(), "router variants as rows: --vary router.capacity_factor=1,1.25,2");
  // Modeled by default, as sweep is: the executed layer fills measured columns the default table does not show.
  add_common_options(desc, opts, true, false);
  if (parse_or_help(argc, argv, desc, "file", 1, help)) return kExitOk;
  opts.no_execute = !executes(opts, false);
  apply_threads(opts.threads);
  const ReportFormat format = parse_report_format(opts.format);
  const Experiment e = load_experiment_for(opts);
  check_records_option(opts, e, format);
  if (!gating.empty() && e.workload.source == WorkloadSource::trace) {
    // Naming strategies asks for re-routing, which needs the router's input; without it the trace is only
    // replayed as recorded (the experiment's own row).
    const std::string path = resolve_workload_path(e);
    if (!trace_can_reroute(path, e.model.experts)) {
      throw InputError(path + ": \"logits\": expected on every line for --gating " + gating +
                       " (re-routing), got none: a trace without logits is only replayed as recorded (leave out "
                       "--gating)");
    }
  }
  const std::vector<RouterVariant> variants = compare_variants(e, gating, varies);
  std::vector<Experiment> rows = variant_experiments(e, variants);
  for (Experiment& row : rows) {  // a --vary key is one the user set
    for (const std::string& v : varies) {
      row.given_keys.push_back(v.substr(0, v.find('=')));
      row.set_keys.push_back(row.given_keys.back());
    }
  }
  warn_inert_keys(rows, effect_context(opts, "compare", e), opts.strict);
  std::unique_ptr<RecordSpool> spool;
  const RunResult run = run_experiment(e, variants, run_options(opts, "compare", &spool));
  return emit_run(opts, run, format, "compare", spool.get());
}

}  // namespace moesim::cli
