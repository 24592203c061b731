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

// Every combination of the --vary axes, one KEY=VALUE per axis in the order given ({{}} without an axis);
// each KEY=v1,v2,... is checked for its shape first.
std::vector<std::vector<std::string>> vary_combinations(const std::vector<std::string>& varies) {
  std::vector<std::vector<std::string>> combos = {{}};
  for (const std::string& v : varies) {
    const auto eq = v.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
      throw InputError("--vary: expected KEY=v1,v2,..., got '" + v + "'");
    std::vector<std::vector<std::string>> next;
    for (const auto& c : combos)
      for (const std::string& value : split(v.substr(eq + 1), ',')) {
        auto n = c;
        n.push_back(v.substr(0, eq) + "=" + value);
        next.push_back(n);
      }
    combos = next;
  }
  return combos;
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
  const std::vector<std::vector<std::string>> combos = vary_combinations(varies);
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
          throw InputError("--vary " + s + ": only router.* keys vary between the rows of one experiment");
        apply_override(e, s);
        label += " " + s.substr(7);
      }
      variants.push_back({label, e.router});
    }
  }
  return variants;
}

namespace {

// The rows of a compare whose --vary names keys outside router.* (placement.replicas, placement.devices,
// hardware, ...): one experiment per combination of those, each with the router rows of the rest. The values of
// one combination are applied together, so a combination valid only whole is accepted in any order.
struct CompareGroup {
  Experiment experiment;
  std::vector<std::string> settings;  // the non-router KEY=VALUE of this group
  std::vector<RouterVariant> variants;
};

std::vector<CompareGroup> compare_groups(const Experiment& base, const std::string& gating,
                                         const std::vector<std::string>& varies) {
  // Router keys vary within a group (compare_variants); every other key makes groups of its own.
  std::vector<std::string> router_varies, other_varies;
  for (const std::string& v : varies) (v.rfind("router.", 0) == 0 ? router_varies : other_varies).push_back(v);
  const std::vector<std::vector<std::string>> combos = vary_combinations(other_varies);
  std::vector<CompareGroup> groups;
  for (const auto& combo : combos) {
    CompareGroup g;
    g.experiment = base;
    g.settings = combo;
    if (!combo.empty()) {
      try {
        apply_overrides(g.experiment, combo);
      } catch (const ConfigError& ex) {
        std::string message = ex.what();
        for (const std::string& s : combo)
          for (size_t at = message.find("--set " + s); at != std::string::npos; at = message.find("--set " + s, at))
            message.replace(at, 5, "--vary");
        throw ConfigError(message);
      }
    }
    g.variants = compare_variants(g.experiment, gating, router_varies);
    for (RouterVariant& v : g.variants)
      for (const std::string& s : combo) v.label += " " + s;
    groups.push_back(std::move(g));
  }
  return groups;
}

}  // namespace

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
      "vary", po::value(&varies)->composing(),
      "variants as rows: --vary router.capacity_factor=1,1.25,2 or any other key, e.g. --vary placement.replicas=0,32");
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
  const std::vector<CompareGroup> groups = compare_groups(e, gating, varies);
  std::vector<Experiment> rows;
  for (const CompareGroup& g : groups) {
    for (Experiment& row : variant_experiments(g.experiment, g.variants)) rows.push_back(std::move(row));
  }
  for (Experiment& row : rows) {  // a --vary key is one the user set
    for (const std::string& v : varies) {
      row.given_keys.push_back(v.substr(0, v.find('=')));
      row.set_keys.push_back(row.given_keys.back());
    }
  }
  warn_inert_keys(rows, effect_context(opts, "compare", e), opts.strict);
  std::unique_ptr<RecordSpool> spool;
  if (groups.size() == 1) {
    const RunResult run = run_experiment(groups.front().experiment, groups.front().variants,
                                         run_options(opts, "compare", &spool));
    return emit_run(opts, run, format, "compare", spool.get());
  }
  // One run a group, their rows side by side under the first group's header; each row's placement and plan are
  // its own (the devices column, the placement lines).
  if (opts.records) throw InputError("--records: expected only when --vary names router.* keys alone");
  RunResult run;
  for (const CompareGroup& g : groups) {
    RunResult part = run_experiment(g.experiment, g.variants, run_options(opts, "compare", nullptr));
    if (run.variants.empty()) {
      run = std::move(part);
      run.varied = true;
    } else {
      for (VariantResult& v : part.variants) run.variants.push_back(std::move(v));
    }
  }
  return emit_run(opts, run, format, "compare", nullptr);
}

}  // namespace moesim::cli
