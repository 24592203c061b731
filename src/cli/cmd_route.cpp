// `moesim route --logits FILE [--gating G] [--top-k K] [--capacity-factor CF] [--renormalize]`:
// routes a user's own logits (.npy or .csv) with any strategy and prints the balance metrics.
// The router settings are the built-in experiment's router with capacity_factor 0 (dropless),
// then these options, then --set; model.experts comes from the file's column count.
#include <iostream>
#include <sstream>

#include "cli/cli_common.hpp"
#include "common/error.hpp"
#include "config/load_config.hpp"
#include "router/balance_metrics.hpp"
#include "router/route.hpp"
#include "workload/logits_file.hpp"

namespace moesim::cli {
int cmd_route(int argc, char** argv) {
  CommonOptions opts;
  bool help = false, renormalize = false;
  std::string logits_path, gating;
  int top_k = 0;
  std::string capacity_factor;  // passed through as an override, validated like any --set
  po::options_description desc("moesim route --logits FILE [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "logits", po::value(&logits_path), "router logits [tokens, experts]: .npy (float32/float64) or .csv")(
      "gating", po::value(&gating), "gating strategy (default token_choice)")(
      "top-k", po::value(&top_k), "experts per token (default 2, at most the column count)")(
      "capacity-factor", po::value(&capacity_factor), "capacity factor (default 0: dropless)")(
      "renormalize", po::bool_switch(&renormalize), "renormalise each token's k weights to sum to 1");
  add_common_options(desc, opts, false);
  parse_command_line(argc, argv, desc, nullptr, 0);
  if (help) {
    std::cout << desc << "\n";
    return kExitOk;
  }
  if (logits_path.empty()) throw InputError("--logits: expected a .npy or .csv file of router logits");
  apply_threads(opts.threads);
  const ReportFormat format = parse_report_format(opts.format);
  const LogitsMatrix m = read_logits_file(logits_path);

  std::vector<std::string> sets = {"model.experts=" + std::to_string(m.num_experts),
                                   "model.top_k=" + std::to_string(top_k > 0 ? top_k : std::min(2, m.num_experts)),
                                   "router.capacity_factor=0", "router.groups=1", "router.topk_groups=1"};
  if (top_k < 0 || (top_k > m.num_experts))
    throw InputError("--top-k: expected 1.." + std::to_string(m.num_experts) + " (the file's expert count), got " +
                     std::to_string(top_k));
  if (!gating.empty()) sets.push_back("router.gating=" + gating);
  if (!capacity_factor.empty()) sets.push_back("router.capacity_factor=" + capacity_factor);
  if (renormalize) sets.push_back("router.renormalize=true");
  sets.insert(sets.end(), opts.overrides.begin(), opts.overrides.end());
  const Experiment e = default_experiment(sets);

  RouteRequest req;
  req.logits = m.values.data();
  req.num_tokens = m.num_tokens;
  req.num_experts = m.num_experts;
  req.top_k = e.model.top_k;
  req.seed = e.workload.seed;
  RouterState state;
  const Routing r = route_omp(e.router, req, &state);
  const BalanceMetrics bm = compute_balance_metrics(r, m.values.data(), e.router.layout, e.router.block_size);

  nlohmann::json j;
  j["schema_version"] = kReportSchemaVersion;
  j["file"] = logits_path;
  j["num_tokens"] = m.num_tokens;
  j["num_experts"] = m.num_experts;
  j["top_k"] = e.model.top_k;
  j["gating"] = to_string(e.router.gating);
  j["capacity_factor"] = e.router.capacity_factor;
  const nlohmann::json metrics = metrics_to_json(bm);
  j["metrics"] = metrics;

  if (format == ReportFormat::json) {
    emit(opts, j.dump(2) + "\n");
    return kExitOk;
  }
  std::ostringstream os;
  os << logits_path << ": " << m.num_tokens << " tokens x " << m.num_experts << " experts, " << to_string(e.router.gating)
     << ", top_k " << e.model.top_k << "\n";
  for (auto it = metrics.begin(); it != metrics.end(); ++it) os << "  " << it.key() << ": " << it.value().dump() << "\n";
  emit(opts, os.str());
  return kExitOk;
}

}  // namespace moesim::cli
