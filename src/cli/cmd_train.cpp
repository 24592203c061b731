// `moesim train [FILE] [--compare] [--capacity-factors LIST] [--set KEY=VALUE]... [--format table|json|csv|markdown|html]`:
// one optimizer step of Megatron-style MoE training (src/train/train_step.hpp) for the experiment's model, router,
// workload, hardware and train: section, with its erosion against forced balance; --compare puts forced balance,
// the configured router dropless and the router at each capacity factor side by side (docs/training.md).
// Covered by tests/cli/train_cli_test.cpp.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>

#include "src/cli/cli_common.hpp"
#include "src/common/error.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/report/train_report.hpp"
#include "src/train/train_input.hpp"
#include "src/train/train_routing.hpp"
#include "src/train/train_step.hpp"

namespace moesim::cli {
namespace {

// "1,1.25,2": capacity factors > 0.
std::vector<double> parse_capacity_factors(const std::string& text) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || !(v > 0) || v > 1000)
      throw InputError("--capacity-factors: expected a comma list of capacity factors in (0, 1000], got '" + text + "'");
    out.push_back(v);
  }
  if (out.empty()) throw InputError("--capacity-factors: expected at least one capacity factor, got ''");
  return out;
}

std::string cf_text(double cf) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", cf);
  return buf;
}

}  // namespace

int cmd_train(int argc, char** argv) {
  CommonOptions opts;
  bool help = false, compare = false;
  std::string factors_text;
  po::options_description desc("moesim train [FILE] [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "file", po::value(&opts.files), "experiment YAML: its model, router, workload, hardware and train: section "
                                      "(default: the built-in quickstart)")(
      "compare", po::bool_switch(&compare),
      "forced balance, the configured router dropless and at each --capacity-factors, side by side")(
      "capacity-factors", po::value(&factors_text),
      "with --compare: the capacity factors of the token-dropping rows (default 1,1.25,2)");
  desc.add_options()("set", po::value(&opts.overrides)->composing(), "override a config key: KEY=VALUE (repeatable)")(
      "format", po::value(&opts.format)->default_value("table"), "table|json|csv|markdown|html")(
      "out", po::value(&opts.out), "write the report to this file (atomically) instead of stdout")(
      "strict", po::bool_switch(&opts.strict), "a key you set that has no effect is an error (exit 2)")(
      "wide", po::bool_switch(&opts.wide), "with --compare: every column of the table, past 120 characters");
  if (parse_or_help(argc, argv, desc, "file", 1, help)) return kExitOk;
  if (!factors_text.empty() && !compare) throw InputError("--capacity-factors: expected with --compare only");
  if (opts.wide && !compare) throw InputError("--wide: expected with --compare only (one step's table fits)");
  const bool html = opts.format == "html";
  const ReportFormat format = html ? ReportFormat::table : parse_report_format(opts.format);
  const std::vector<double> factors = parse_capacity_factors(factors_text.empty() ? "1,1.25,2" : factors_text);

  const Experiment e = load_experiment_for(opts);
  // The variants: as configured, or the comparison's rows.
  struct Row {
    std::string label;
    TrainRouting routing;
    double cf = 0;
    Layout layout = Layout::dropless;
  };
  std::vector<Row> rows;
  if (!compare) {
    rows.push_back({"as configured", e.train.routing, e.router.capacity_factor, e.router.layout});
  } else {
    const TrainRouting router = e.train.routing.kind == TrainRoutingKind::forced_balance
                                    ? TrainRouting{TrainRoutingKind::model, 0}
                                    : e.train.routing;
    // Token dropping pads each expert to its capacity (Megatron-LM --moe-pad-expert-input-to-capacity, as Switch
    // and GShard do) unless router.layout is given.
    const bool layout_given = std::find(e.given_keys.begin(), e.given_keys.end(), "router.layout") != e.given_keys.end();
    const Layout dropping = layout_given ? e.router.layout : Layout::capacity;
    rows.push_back({"forced balance", TrainRouting{TrainRoutingKind::forced_balance, 0}, 0, Layout::dropless});
    rows.push_back({"router, dropless", router, 0, Layout::dropless});
    for (double cf : factors) rows.push_back({"router, capacity " + cf_text(cf), router, cf, dropping});
  }
  std::vector<Experiment> row_experiments;
  for (const Row& r : rows) {
    Experiment x = e;
    x.train.routing = r.routing;
    x.router.capacity_factor = r.cf;
    x.router.layout = r.layout;
    row_experiments.push_back(x);
  }
  EffectContext ctx;
  ctx.command = "train";
  ctx.executes = false;
  ctx.compares_capacity = compare;
  warn_inert_keys(row_experiments, ctx, opts.strict);

  const HardwareProfile hw = load_hardware_profile(e.hardware, e.source_file);
  const TrainShape shape = train_shape(e.model);
  const TrainLayout layout = train_layout(e.train, shape, hw.devices_per_node);
  // One router per capacity factor (route once, cost many): the reference's (dropless) serves every row's.
  std::map<double, std::unique_ptr<TrainRouter>> routers;
  auto router_for = [&](const Experiment& x) -> TrainRouter& {
    std::unique_ptr<TrainRouter>& r = routers[x.router.capacity_factor];
    if (!r) r = std::make_unique<TrainRouter>(x);
    return *r;
  };
  Experiment dropless = e;
  dropless.router.capacity_factor = 0;
  const TrainLoads reference = router_for(dropless).reference(layout);
  TrainReport report;
  report.experiment = &e;
  report.hardware = &hw;
  report.compare = compare;
  report.wide = opts.wide;
  if (e.workload.source == WorkloadSource::load_profile &&
      std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.routing.kind == TrainRoutingKind::model; }))
    report.file_read = e.workload.path;
  const TrainFigures figures = TrainFigures::fitted();
  for (size_t i = 0; i < rows.size(); ++i) {
    const Experiment& x = row_experiments[i];
    const TrainLoads loads = router_for(x).loads(x.train.routing, layout);
    TrainVariant v;
    v.label = rows[i].label;
    v.routing = rows[i].routing;
    v.capacity_factor = rows[i].cf;
    v.layout = rows[i].layout;
    v.step = model_train_step(hw, shape, layout, ExpertRows{x.router.layout, x.router.block_size}, loads, reference,
                              figures);
    report.variants.push_back(std::move(v));
  }
  emit(opts, html ? format_train_html(report) : format_train(report, format));
  return kExitOk;
}

}  // namespace moesim::cli
