// `moesim check FILE... [--baseline results.json] [--metrics a,b] [--allow-change KEY] [--rtol R] [--atol A]
// [--update-baseline [--force]]`: exit 0 when every expect: bound and baseline comparison holds, 1 with
// one line per failing metric, 2 for bad input, a baseline of another experiment included.
// --update-baseline writes nothing while a bound fails, unless --force. A failing bound on a measured_*
// metric whose times are noisy names the noise reason in its line. The run is always the file's current
// experiment: with --allow-change router.gating its new strategy runs and is compared with the baseline's
// (report/check.hpp baseline_pairs), and every report names what it compared (strategy, config digest, the
// baseline's value per metric). docs/gate-your-ci.md.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <iostream>
#include <sstream>

#include "src/cli/cli_common.hpp"
#include "src/common/digest.hpp"
#include "src/common/error.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "src/report/atomic_write.hpp"
#include "src/report/check.hpp"
#include "src/report/provenance.hpp"
#include "src/report/report.hpp"
#include "src/report/text_format.hpp"

namespace moesim::cli {
namespace {

// Baseline runs by experiment name (report/check.hpp parse_baselines) from the file at `path`.
std::map<std::string, nlohmann::json> read_baselines(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(path + ": expected a baseline JSON file, got a folder");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw open_failure<InputError>(path, path + ": cannot open the baseline for reading");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(path + ": cannot read the baseline");
  return parse_baselines(text.str(), path);
}

// Exit 2 before anything runs when the baseline was recorded from another effective experiment than
// `e`: the same identity as check.hpp experiment_difference, from the experiment before it runs.
void refuse_foreign_baseline(const Experiment& e, const nlohmann::json& base, const std::string& path,
                             const std::vector<std::string>& allowed) {
  const std::string file_read = resolve_workload_path(e);
  nlohmann::json now;
  now["experiment"] = experiment_json(e, file_read);
  now["inputs"] = input_files_json(e, file_read);
  now["hardware"]["digest"] = hardware_digest(load_hardware_profile(e.hardware, e.source_file));
  if (!file_read.empty()) now["workload"]["file_digest"] = file_digest(file_read);
  for (const std::string& key : allowed) {
    if (!names_config_key(now["experiment"]["config"], key))
      throw InputError("--allow-change: expected a key or section of the experiment, as moesim config prints it, got '" +
                       key + "'");
  }
  const auto d = experiment_difference(base, now, allowed);
  if (!d) return;
  throw InputError(path + ": recorded from another experiment than " + e.source_file + ": " + d->key + " is " +
                   d->baseline_value + " there and " + d->run_value + " here (--allow-change " +
                   d->key.substr(0, d->key.find(' ')) + " compares anyway)");
}

// A number of a comparison as the report shows it: "-" for none.
std::string shown_number(double v) { return std::isfinite(v) ? text::real(v) : std::string("-"); }

// One comparison as the table says what it compared: the run's strategy and its config digest against the
// baseline's strategy and digest (or the expect: bounds), then every metric, its value against the baseline's
// (or its bound), the failing ones marked "worse" (a bound: "fails").
std::string compared_line(const CheckComparison& c) {
  auto short_digest = [](const std::string& d) {
    const size_t colon = d.find(':');
    return d.empty() ? std::string("-") : d.substr(colon == std::string::npos ? 0 : colon + 1, 12);
  };
  std::ostringstream os;
  os << "compared " << c.file << ": " << c.strategy << " (config " << short_digest(c.config_digest) << ")";
  if (c.baseline.empty()) {
    os << " with its expect: bounds:";
    for (size_t i = 0; i < c.metrics.size(); ++i) {
      const CheckedMetric& m = c.metrics[i];
      os << (i ? "," : "") << " " << m.metric << " " << shown_number(m.value) << " (" << m.bound
         << (m.passed ? ")" : ", fails)");
    }
  } else {
    os << " with " << c.baseline << ": " << c.baseline_strategy << " (config " << short_digest(c.baseline_config_digest)
       << "), this run / the baseline:";
    for (size_t i = 0; i < c.metrics.size(); ++i) {
      const CheckedMetric& m = c.metrics[i];
      os << (i ? "," : "") << " " << m.metric << " " << shown_number(m.value) << " / " << shown_number(m.baseline)
         << (m.passed ? "" : " (worse)");
    }
    if (c.metrics.empty()) os << " no metric applies";
  }
  return text::wrap(os.str());
}

// check's own report: every failure, what was compared, then the summary line; as text (the FAIL lines), JSON,
// CSV or Markdown.
std::string check_report(ReportFormat format, const std::vector<CheckComparison>& compared, size_t files,
                         size_t expectations, const std::string& baseline, const std::string& aggregate,
                         const std::string& written) {
  const std::vector<CheckFailure> failures = failures_of(compared);
  std::ostringstream os;
  const std::string summary = "check: " + std::to_string(files) + " file(s), " + std::to_string(expectations) +
                              " expectation(s)" + (baseline.empty() ? "" : ", baseline " + baseline) + ": " +
                              std::to_string(failures.size()) + " failure(s)";
  auto number = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  switch (format) {
    case ReportFormat::table:
      os << written;
      for (const CheckFailure& f : failures) os << "FAIL " << f.line() << "\n";
      for (const CheckComparison& c : compared) os << compared_line(c) << "\n";
      os << summary << "\n";
      break;
    case ReportFormat::json: {
      nlohmann::json j;
      j["schema_version"] = kReportSchemaVersion;
      j["moesim_version"] = MOESIM_VERSION;
      j["provenance"] = provenance_json();
      j["files"] = files;
      j["expectations"] = expectations;
      j["baseline"] = baseline.empty() ? nlohmann::json(nullptr) : nlohmann::json(baseline);
      j["aggregate"] = aggregate;
      nlohmann::json rows = nlohmann::json::array();
      for (const CheckFailure& f : failures)
        rows.push_back({{"file", f.file}, {"strategy", f.strategy}, {"metric", f.metric}, {"value", number(f.value)},
                        {"bound", f.bound}});
      j["failures"] = rows;
      nlohmann::json list = nlohmann::json::array();
      for (const CheckComparison& c : compared) {
        nlohmann::json metrics = nlohmann::json::array();
        for (const CheckedMetric& m : c.metrics)
          metrics.push_back({{"metric", m.metric}, {"value", number(m.value)}, {"baseline", number(m.baseline)},
                             {"bound", m.bound}, {"passed", m.passed}});
        const bool bounds = c.baseline.empty();
        list.push_back({{"file", c.file},
                        {"strategy", c.strategy},
                        {"config_digest", c.config_digest},
                        {"against", bounds ? "expect" : "baseline"},
                        {"baseline", bounds ? nlohmann::json(nullptr) : nlohmann::json(c.baseline)},
                        {"baseline_strategy", bounds ? nlohmann::json(nullptr) : nlohmann::json(c.baseline_strategy)},
                        {"baseline_config_digest",
                         bounds ? nlohmann::json(nullptr) : nlohmann::json(c.baseline_config_digest)},
                        {"metrics", metrics}});
      }
      j["compared"] = list;
      j["passed"] = failures.empty();
      os << j.dump(2) << "\n";
      break;
    }
    case ReportFormat::csv:
      os << "file,strategy,config_digest,baseline_strategy,baseline_config_digest,metric,value,baseline,bound,passed\n";
      for (const CheckComparison& c : compared)
        for (const CheckedMetric& m : c.metrics)
          os << text::csv_cell(c.file) << "," << text::csv_cell(c.strategy) << "," << c.config_digest << ","
             << text::csv_cell(c.baseline_strategy) << "," << c.baseline_config_digest << "," << m.metric << ","
             << (std::isfinite(m.value) ? text::real(m.value) : "") << ","
             << (std::isfinite(m.baseline) ? text::real(m.baseline) : "") << "," << text::csv_cell(m.bound) << ","
             << (m.passed ? "true" : "false") << "\n";
      break;
    case ReportFormat::markdown:
      os << "**" << summary << "**\n";
      if (!compared.empty()) {
        os << "\n| file | strategy | config | against | metric | value | baseline | expected | passed |\n"
              "| :--- | :--- | :--- | :--- | :--- | ---: | ---: | :--- | :--- |\n";
        for (const CheckComparison& c : compared)
          for (const CheckedMetric& m : c.metrics)
            os << "| " << c.file << " | " << c.strategy << " | " << c.config_digest << " | "
               << (c.baseline.empty() ? "expect:" : c.baseline + ": " + c.baseline_strategy + " (" +
                                                        c.baseline_config_digest + ")")
               << " | " << m.metric << " | " << shown_number(m.value) << " | " << shown_number(m.baseline) << " | "
               << m.bound << " | " << (m.passed ? "yes" : "**no**") << " |\n";
      }
      break;
  }
  return os.str();
}

}  // namespace

int cmd_check(int argc, char** argv) {
  CommonOptions opts;
  bool help = false, update = false, force = false, execute = false;
  std::string baseline, metrics_list, aggregate = "value";
  std::vector<std::string> allow_change;
  double rtol = kBaselineRtol, atol = kBaselineAtol;
  po::options_description desc("moesim check FILE... [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "file", po::value(&opts.files), "experiment YAML files with expect: blocks")(
      "baseline", po::value(&baseline), "compare against this JSON (from run/compare/check --update-baseline)")(
      "metrics", po::value(&metrics_list),
      "compare these metrics (comma-separated) against the baseline; default: those the expect: block names, "
      "else imbalance, drop_rate, tokens_unrouted, cv, entropy_norm, batching_efficiency, modeled_time_s")(
      "allow-change", po::value(&allow_change)->composing(),
      "compare with a baseline whose experiment differs in this key or section (repeatable)")(
      "rtol", po::value(&rtol), "relative tolerance of float metrics against the baseline (default 1e-6)")(
      "atol", po::value(&atol), "absolute tolerance of float metrics against the baseline (default 1e-12); "
      "counts compare exactly")(
      "aggregate", po::value(&aggregate)->default_value("value"),
      "which value of a run of many batches or records the baseline comparison reads: value (the headline, "
      "a mean over them: docs/design.md) | last (the last batch or record) | mean | p50 | p95 | max")(
      "format", po::value(&opts.format)->default_value("table"), "table | json | csv | markdown")(
      "out", po::value(&opts.out), "write check's report to FILE (atomically) instead of stdout")(
      "update-baseline", po::bool_switch(&update),
      "rewrite --baseline with this run's results; nothing is written when an expect: bound fails")(
      "force", po::bool_switch(&force), "with --update-baseline: write the baseline even when a bound fails")(
      "set", po::value(&opts.overrides)->composing(), "override a config key in every file (repeatable)")(
      "threads", po::value(&opts.threads)->default_value(0), "OpenMP/BLAS threads (0: all cores)")(
      "execute", po::bool_switch(&execute), "also run the executed pipeline (needed for measured_* metrics)")(
      "strict", po::bool_switch(&opts.strict),
      "a config key set to a value that has no effect in this run is an error (exit 2), not a warning");
  if (parse_or_help(argc, argv, desc, "file", -1, help)) return kExitOk;
  if (opts.files.empty()) throw InputError("check: expected at least one experiment file");
  if (!(rtol >= 0) || !(atol >= 0)) throw InputError("--rtol/--atol: expected non-negative numbers");
  const ReportFormat format = parse_report_format(opts.format);
  {
    const auto& aggs = baseline_aggregates();
    if (std::find(aggs.begin(), aggs.end(), aggregate) == aggs.end())
      throw InputError("--aggregate: expected value, last, mean, p50, p95 or max, got '" + aggregate + "'");
    if (aggregate != "value" && baseline.empty())
      throw InputError("--aggregate: expected --baseline FILE (it selects what a baseline comparison reads)");
  }
  if (update && baseline.empty()) throw InputError("--update-baseline: expected --baseline FILE to write");
  if (force && !update) throw InputError("--force: expected --update-baseline (it only forces writing the baseline)");
  if (baseline.empty() && (!metrics_list.empty() || !allow_change.empty()))
    throw InputError(std::string(metrics_list.empty() ? "--allow-change" : "--metrics") +
                     ": expected --baseline FILE (it selects what a baseline comparison reads)");
  std::vector<std::string> requested_metrics;
  for (std::stringstream in(metrics_list); in.good();) {
    std::string m;
    std::getline(in, m, ',');
    if (!m.empty()) requested_metrics.push_back(m);
  }
  apply_threads(opts.threads);

  std::map<std::string, nlohmann::json> baselines;
  if (!baseline.empty() && !update) baselines = read_baselines(baseline);

  // Load and validate every file before running any, so bad input fails fast with exit 2.
  std::vector<Experiment> experiments;
  for (size_t i = 0; i < opts.files.size(); ++i) experiments.push_back(load_experiment_for(opts, i));

  std::vector<CheckComparison> compared;
  nlohmann::json runs = nlohmann::json::array();
  size_t checked = 0;
  for (const Experiment& e : experiments) {
    std::vector<std::string> labels;
    const auto b = baselines.find(e.name);
    if (!baselines.empty() && b == baselines.end()) {
      std::string names;
      for (const auto& [name, run] : baselines) names += (names.empty() ? "" : ", ") + name;
      throw InputError(baseline + ": expected a run of experiment '" + e.name + "' (" + e.source_file +
                       "), got runs of: " + names);
    }
    std::vector<StrategyPair> pairs;
    if (b != baselines.end()) {
      baseline_labels(b->second, baseline);  // validates the baseline's strategies
      pairs = baseline_pairs(e, b->second);
      for (const StrategyPair& p : pairs) labels.push_back(p.run_label);
    }
    bool needs_execute = execute;
    for (const Expectation& x : e.expect) needs_execute |= is_measured(x.metric);
    RunOptions ro;
    ro.execute = needs_execute;
    ro.memory_limit_bytes = parse_memory_limit("");
    // A bad strategy label names the file it came from: the experiment's expect: block or the baseline.
    try {
      check_variants(e, {});
    } catch (const Error& ex) {
      throw InputError(e.source_file + ": expect: " + ex.what());
    }
    std::vector<RouterVariant> variants;
    try {
      variants = check_variants(e, labels);
    } catch (const Error& ex) {
      throw InputError(baseline + ": " + ex.what());
    }
    EffectContext ctx = effect_context(opts, "check", e);
    ctx.executes = needs_execute;
    ctx.cuda = false;  // check executes on the CPU
    warn_inert_keys(variant_experiments(e, variants), ctx, opts.strict);
    const std::vector<std::string> metrics = baseline_metrics(e, requested_metrics);
    if (b != baselines.end()) refuse_foreign_baseline(e, b->second, baseline, allow_change);
    const RunResult run = run_experiment(e, variants, ro);
    nlohmann::json run_json = run_to_json(run);
    const std::string digest = config_digest(run_json);
    std::vector<CheckComparison> c = expectation_comparisons(run, digest);
    // A bound on a measured metric is evaluated even when the measured times are noisy; its failure
    // line then says so and why (docs/design.md, "Measured spread and noise").
    for (CheckComparison& x : c) {
      for (CheckedMetric& m : x.metrics) {
        if (m.passed || !is_measured(m.metric)) continue;
        for (const VariantResult& v : run.variants)
          if (v.variant.label == x.strategy && v.executed && v.measured_noise.noisy)
            m.bound += " (measured times noisy: " + v.measured_noise.reason + ")";
      }
    }
    compared.insert(compared.end(), c.begin(), c.end());
    if (b != baselines.end()) {
      auto g = baseline_comparisons(run, digest, b->second, baseline, pairs, metrics, rtol, atol, aggregate);
      compared.insert(compared.end(), g.begin(), g.end());
    }
    checked += e.expect.size();
    runs.push_back(std::move(run_json));
  }
  const std::vector<CheckFailure> failures = failures_of(compared);
  std::string written;
  if (update && !failures.empty() && !force) {
    written = "check: the baseline " + baseline + " was not written: " + std::to_string(failures.size()) +
              " expect: bound(s) fail (--force writes it anyway)\n";
  } else if (update) {
    const nlohmann::json out =
        runs.size() == 1
            ? runs[0]
            : nlohmann::json{{"schema_version", kReportSchemaVersion}, {"provenance", provenance_json()}, {"runs", runs}};
    write_file_atomic(baseline, out.dump(2) + "\n");
    written = "check: wrote the baseline " + baseline + " (" + std::to_string(runs.size()) + " run(s))\n";
  }
  emit(opts, check_report(format, compared, opts.files.size(), checked, baselines.empty() ? "" : baseline, aggregate,
                          written));
  return failures.empty() ? kExitOk : kExitCheckFailed;
}

}  // namespace moesim::cli
