// The two top-level keys of an experiment outside the schema table: hardware (a profile name or path, or
// an inline table kept as YAML text) and expect (bounds on report metrics, as a map or a list, optionally
// per strategy label), with the metric names and strategy labels they accept. Deterministic, host only.
// Declared in src/config/load_config_internal.hpp; covered by tests/config/load_config_test.cpp.
#include "src/config/load_config_internal.hpp"

#include <yaml-cpp/yaml.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "src/config/load_config.hpp"

namespace moesim {

const std::vector<std::string>& known_expect_metrics() {
  static const std::vector<std::string> metrics = {
      "imbalance",   "max_vio",          "demand_imbalance", "cv",           "entropy_norm",   "active_experts",
      "capacity",    "dropped",          "drop_rate",    "tokens_unrouted", "aux_loss",
      "aux_loss_switch", "aux_loss_gshard", "z_loss",    "padding_waste",  "top20_share",
      "bottom20_share",  "dead_experts",  "rank_imbalance", "batching_efficiency", "modeled_time_s",
      "critical_batch", "measured_layer_s", "measured_batching_efficiency"};
  return metrics;
}

namespace config_detail {

bool is_known_metric(const std::string& m) {
  for (const std::string& k : known_expect_metrics()) {
    if (k == m) return true;
  }
  return false;
}

// A strategy label: a gating name, then optional router overrides, e.g. "token_choice capacity_factor=1.5"
// (the form `moesim check` and `compare` use to name router variants; the values are checked when applied).
bool valid_strategy_label(const std::string& label) {
  std::istringstream words(label);
  std::string word;
  if (!(words >> word) || !parse_gating(word)) return false;
  const Section* router = find_section("router");
  while (words >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos || eq + 1 == word.size() || !router->find(word.substr(0, eq))) return false;
  }
  return true;
}

void Loader::read_hardware(const YAML::Node& n, const std::string& at, Experiment& e) {
  const std::string what = "a profile name, a profile path or an inline map";
  e.hardware.origin = at + ": hardware";  // a file line or the --set that gave the key
  if (n.IsScalar() && !n.Scalar().empty()) {
    e.hardware.name = n.Scalar();
    e.hardware.inline_yaml.clear();
  } else if (n.IsMap()) {
    YAML::Emitter out;
    out << n;
    e.hardware.name.clear();
    e.hardware.inline_yaml = out.c_str();
    // The table is kept as YAML text (re-emitted by `moesim config`, parsed by the profile reader). yaml-cpp's
    // emitter can write text its own parser rejects (a fuzzed value of control bytes and '~' runs did): such
    // a table is refused here, once, with the key named.
    bool reparses = out.good();
    try {
      if (reparses) YAML::Load(e.hardware.inline_yaml);
    } catch (const YAML::Exception&) {
      reparses = false;
    }
    if (!reparses) fail_expected(at, "hardware", "an inline map of plain keys and values", "one that cannot be written back as YAML");
  } else {
    fail_expected(at, "hardware", what, describe(n));
  }
}

Expectation Loader::read_expect_item(const YAML::Node& n, const std::string& path, const std::string& metric) {
  const std::string at = where(path, n.Mark());
  if (!n.IsMap()) fail_expected(at, path, "a map with min, max, aggregate, strategy", describe(n));
  Expectation x;
  x.metric = metric;
  std::set<std::string> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string k = key_name(it->first, path, where(path, it->first.Mark()), seen);
    const std::string kp = path + "." + k;
    const std::string kat = where(kp, it->first.Mark());
    const YAML::Node v = it->second;
    if (k == "metric" && metric.empty()) {
      x.metric = read_string(v, kp, kat);
      if (!is_known_metric(x.metric)) {
        fail_expected(kat, kp, "one of " + join(known_expect_metrics(), "|"), describe(v));
      }
    } else if (k == "min") {
      x.min = read_double(v, kp, kat, Bound::none);
    } else if (k == "max") {
      x.max = read_double(v, kp, kat, Bound::none);
    } else if (k == "aggregate") {
      x.aggregate = read_string(v, kp, kat);
      if (!one_of(x.aggregate, kAggregates)) fail_expected(kat, kp, "one of " + join(to_vector(kAggregates), "|"), describe(v));
    } else if (k == "strategy") {
      x.strategy = read_string(v, kp, kat);
      if (!valid_strategy_label(x.strategy)) {
        fail_expected(kat, kp, "a gating name (" + enum_choices<Gating>() + "), optionally followed by router KEY=VALUE words",
                      describe(v));
      }
    } else {
      std::vector<std::string> known = to_vector(kExpectItemKeys);
      if (!metric.empty()) known.erase(known.begin());
      fail(kat, kp, "unknown key (known: " + join(known, ", ") + ")");
    }
  }
  if (x.metric.empty()) fail_expected(at, path, "a metric: key", "none");
  if (!x.min && !x.max) fail_expected(at, path, "at least one of min, max", "neither");
  if (x.min && x.max && *x.min > *x.max) {
    fail_expected(where(path + ".max", n["max"].Mark()), path + ".max",
                  "a number >= min (" + format_number(*x.min) + ")", format_number(*x.max));
  }
  return x;
}

void Loader::read_expect(const YAML::Node& n, const std::string& at, Experiment& e) {
  e.expect.clear();
  if (n.IsNull()) return;
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) {
      e.expect.push_back(read_expect_item(n[i], "expect[" + std::to_string(i) + "]", ""));
    }
    return;
  }
  if (!n.IsMap()) fail_expected(at, "expect", "a map from metric name to bounds, or a list of bounds", describe(n));
  std::set<std::string> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string metric = key_name(it->first, "expect", where("expect", it->first.Mark()), seen);
    const std::string path = "expect." + metric;
    if (!is_known_metric(metric)) {
      fail(where(path, it->first.Mark()), path,
           "unknown key (" + nearest_names(metric, known_expect_metrics(), "expect.", "a metric of docs/json-schema.md's metrics") + ")");
    }
    const YAML::Node v = it->second;
    if (v.IsSequence()) {  // several bounds on one metric, e.g. one per strategy
      for (size_t i = 0; i < v.size(); ++i) {
        e.expect.push_back(read_expect_item(v[i], path + "[" + std::to_string(i) + "]", metric));
      }
    } else {
      e.expect.push_back(read_expect_item(v, path, metric));
    }
  }
}

}  // namespace config_detail
}  // namespace moesim
