// Expectation and baseline checks (see check.hpp).
#include "src/report/check.hpp"

#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/report/report.hpp"
#include "src/report/text_format.hpp"

namespace moesim {
namespace {

std::string num(double v) { return text::real(v); }

[[noreturn]] void fail(const std::string& message) { throw InputError(message); }

// A JSON value quoted in a message, cut to a readable length. Arrays and objects are named, not
// dumped: dump() recurses once per nesting level and a hostile file nests 100000 deep.
std::string shown(const nlohmann::json& v) {
  if (v.is_structured()) return std::string("an ") + v.type_name();
  const std::string s = v.dump();
  return s.size() <= 64 ? s : s.substr(0, 64) + "...";
}

bool matches(const std::string& wanted, const VariantResult& v) {
  return wanted.empty() || wanted == v.variant.label || wanted == to_string(v.variant.router.gating);
}

}  // namespace

std::string CheckFailure::line() const {
  return file + ": " + strategy + ": " + metric + " = " + num(value) + ", expected " + bound;
}

int metric_direction(const std::string& m) {
  static const std::set<std::string> higher = {"entropy_norm", "active_experts", "bottom20_share",
                                               "batching_efficiency"};
  static const std::set<std::string> lower = {"imbalance",      "demand_imbalance", "cv",
                                              "dead_experts",   "dropped",          "drop_rate",
                                              "tokens_unrouted", "padding_waste",   "top20_share",
                                              "aux_loss",       "aux_loss_switch",  "aux_loss_gshard",
                                              "z_loss",         "rank_imbalance",   "modeled_time_s"};
  if (higher.count(m)) return +1;
  if (lower.count(m)) return -1;
  return 0;
}

std::vector<RouterVariant> check_variants(const Experiment& e, const std::vector<std::string>& labels) {
  std::vector<RouterVariant> variants = own_variant(e);
  std::set<std::string> have = {variants.front().label};
  auto add_label = [&](const std::string& label) {
    if (label.empty() || have.count(label)) return;
    std::istringstream words(label);
    std::string gating;
    words >> gating;
    const auto g = parse_gating(gating);
    if (!g) fail("strategy '" + label + "': unknown gating '" + gating + "'");
    Experiment x = e;
    x.router.gating = *g;
    try {
      for (std::string kv; words >> kv;) apply_override(x, "router." + kv);
    } catch (const Error& ex) {
      fail("strategy '" + label + "': " + ex.what());
    }
    variants.push_back({label, x.router});
    have.insert(label);
  };
  for (const Expectation& x : e.expect) add_label(x.strategy);
  for (const std::string& l : labels) add_label(l);
  return variants;
}

std::vector<CheckFailure> check_expectations(const RunResult& run) {
  std::vector<CheckFailure> failures;
  const std::string& file = run.experiment.source_file;
  for (const Expectation& x : run.experiment.expect) {
    for (const VariantResult& v : run.variants) {
      if (!matches(x.strategy, v)) continue;
      const std::string name = x.aggregate == "value" ? x.metric : x.metric + "." + x.aggregate;
      const std::optional<double> value = metric_value(run, v, x.metric, x.aggregate);
      if (!value) {
        failures.push_back({file, v.variant.label, name, NAN, "a value, but this run does not produce it"});
        continue;
      }
      if (x.min && !(*value >= *x.min)) failures.push_back({file, v.variant.label, name, *value, "min " + num(*x.min)});
      if (x.max && !(*value <= *x.max)) failures.push_back({file, v.variant.label, name, *value, "max " + num(*x.max)});
    }
  }
  return failures;
}

std::vector<std::string> baseline_labels(const nlohmann::json& b, const std::string& name) {
  if (!b.is_object() || !b.contains("schema_version") || !b.contains("strategies") || !b["strategies"].is_array())
    fail(name + ": expected a moesim run JSON (schema_version, strategies[]), got something else");
  if (b["schema_version"] != kReportSchemaVersion)
    fail(name + ": schema_version: expected " + std::to_string(kReportSchemaVersion) + ", got " +
         shown(b["schema_version"]));
  std::vector<std::string> labels;
  for (const auto& s : b["strategies"]) {
    if (!s.is_object() || !s.contains("strategy") || !s["strategy"].is_string() || !s.contains("metrics") ||
        !s["metrics"].is_object())
      fail(name + ": strategies[]: expected objects with 'strategy' and 'metrics'");
    labels.push_back(s["strategy"].get<std::string>());
  }
  return labels;
}

std::map<std::string, nlohmann::json> parse_baselines(const std::string& text, const std::string& name) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(name + ": expected JSON written by moesim run/compare/check, got a parse error: " + e.what());
  }
  std::vector<const nlohmann::json*> runs;
  if (j.is_object() && j.contains("runs") && j["runs"].is_array()) {
    for (const auto& r : j["runs"]) runs.push_back(&r);
  } else {
    runs.push_back(&j);
  }
  std::map<std::string, nlohmann::json> by_name;
  for (const nlohmann::json* r : runs) {
    baseline_labels(*r, name);  // validates the shape
    if (!r->contains("experiment") || !(*r)["experiment"].is_object() || !(*r)["experiment"].contains("name") ||
        !(*r)["experiment"]["name"].is_string())
      fail(name + ": experiment.name: expected a string in every baseline run");
    by_name[(*r)["experiment"]["name"].get<std::string>()] = *r;
  }
  return by_name;
}

std::vector<CheckFailure> check_against_baseline(const RunResult& run, const nlohmann::json& baseline, double rtol,
                                                 double atol) {
  std::vector<CheckFailure> failures;
  for (const auto& s : baseline["strategies"]) {
    const std::string label = s["strategy"].get<std::string>();
    for (const VariantResult& v : run.variants) {
      if (v.variant.label != label) continue;
      for (const std::string& metric : scalar_metric_names()) {
        const int dir = metric_direction(metric);
        if (dir == 0) continue;
        // Batch metrics sit under "metrics"; modeled ones under modeled.<placement>.
        const nlohmann::json* base = nullptr;
        if (s["metrics"].contains(metric)) base = &s["metrics"][metric];
        const std::optional<double> now = metric_value(run, v, metric, "value");
        if (!base || !base->is_number() || !now) continue;
        const double was = base->get<double>();
        const double slack = atol + rtol * std::fabs(was);
        const bool worse = dir < 0 ? *now > was + slack : *now < was - slack;
        if (worse) {
          failures.push_back({run.experiment.source_file, label, metric, *now,
                              std::string(dir < 0 ? "at most" : "at least") + " baseline " + num(was) + " (rtol " +
                                  num(rtol) + ", atol " + num(atol) + ")"});
        }
      }
    }
  }
  return failures;
}

}  // namespace moesim
