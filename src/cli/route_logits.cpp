// One logits matrix routed as `moesim route` does it (see route_logits.hpp).
#include "src/cli/route_logits.hpp"

#include <algorithm>

#include "src/cli/cli_common.hpp"
#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/cost/hardware_profile.hpp"

namespace moesim::cli {

Experiment route_experiment(const RouteSettings& s, int num_experts) {
  if (s.renormalize && s.no_renormalize)
    throw InputError("--renormalize, --no-renormalize: expected one of them, got both");
  if (s.top_k < 0 || s.top_k > num_experts)
    throw InputError("--top-k: expected 1.." + std::to_string(num_experts) + " (the file's expert count), got " +
                     std::to_string(s.top_k));
  const std::string k = std::to_string(s.top_k > 0 ? s.top_k : std::min(2, num_experts));
  std::vector<std::string> sets = {"model.experts=" + std::to_string(num_experts), "model.top_k=" + k,
                                   "router.capacity_factor=0", "router.groups=1", "router.topk_groups=1"};
  // Routing statistics only: no placement is modeled, so the built-in one's devices must not constrain E.
  sets.push_back("placement.kind=single");
  // The flags as overrides, each with the flag it came from, which an error about it names.
  std::vector<std::pair<std::string, std::string>> flags = {
      {"model.experts=" + std::to_string(num_experts), "the logits' " + std::to_string(num_experts) + " columns"},
      {"model.top_k=" + k, s.top_k > 0 ? "--top-k " + k : "the default top-k " + k}};
  if (!s.gating.empty()) flags.push_back({"router.gating=" + s.gating, "--gating " + s.gating});
  if (!s.capacity_factor.empty())
    flags.push_back({"router.capacity_factor=" + s.capacity_factor, "--capacity-factor " + s.capacity_factor});
  if (s.renormalize) flags.push_back({"router.renormalize=true", "--renormalize"});
  if (s.no_renormalize) flags.push_back({"router.renormalize=false", "--no-renormalize"});
  for (size_t i = 2; i < flags.size(); ++i) sets.push_back(flags[i].first);
  sets.insert(sets.end(), s.overrides.begin(), s.overrides.end());
  Experiment e = load_with_flags(sets, flags);
  // The settings route makes itself (the file's expert count, dropless, no placement) are not the user's.
  const auto users = [&](const std::string& key) {
    if (key == "router.gating") return !s.gating.empty();
    if (key == "model.top_k") return s.top_k > 0;
    if (key == "router.capacity_factor") return !s.capacity_factor.empty();
    if (key == "router.renormalize") return s.renormalize || s.no_renormalize;
    for (const std::string& o : s.overrides)
      if (o.compare(0, key.size() + 1, key + "=") == 0) return true;
    return false;
  };
  for (auto* keys : {&e.given_keys, &e.set_keys})
    keys->erase(std::remove_if(keys->begin(), keys->end(), [&](const std::string& k) { return !users(k); }),
                keys->end());
  return e;
}

RoutedLogits route_logits(const Experiment& e, const float* logits, int64_t num_tokens, int num_experts) {
  RouteRequest req;
  req.logits = logits;
  req.num_tokens = num_tokens;
  req.num_experts = num_experts;
  req.top_k = e.model.top_k;
  req.seed = e.workload.seed;
  RouterState state;
  RoutedLogits out;
  out.routing = route_omp(e.router, req, &state);
  out.metrics = compute_balance_metrics(out.routing, logits, e.router.layout, e.router.block_size);
  out.expert_bias = std::move(state.expert_bias);
  return out;
}

RouteReport route_report(const std::string& file, const Experiment& e, const RoutedLogits& r, int64_t num_tokens,
                         int num_experts, double memory_estimate_bytes, double memory_limit_bytes) {
  RouteReport report;
  report.file = file;
  report.num_tokens = num_tokens;
  report.num_experts = num_experts;
  report.top_k = e.model.top_k;
  report.gating = to_string(e.router.gating);
  report.capacity_factor = e.router.capacity_factor;
  report.memory_estimate_bytes = memory_estimate_bytes;
  report.memory_limit_bytes = memory_limit_bytes;
  report.metrics = r.metrics;
  report.expert_bias = r.expert_bias;
  report.experiment = e;
  report.hardware_digest = hardware_digest(load_hardware_profile(e.hardware, e.source_file));
  return report;
}

}  // namespace moesim::cli
