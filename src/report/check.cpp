// Expectation and baseline checks (see check.hpp).
#include "src/report/check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "src/common/digest.hpp"
#include "src/common/error.hpp"
#include "src/common/json_error.hpp"
#include "src/config/load_config.hpp"
#include "src/report/provenance.hpp"
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

// Whether `key` is one of `allowed` or lies under one ("workload" allows workload.skew).
bool allowed_key(const std::string& key, const std::vector<std::string>& allowed) {
  for (const std::string& a : allowed)
    if (key == a || (key.size() > a.size() && key.compare(0, a.size(), a) == 0 && key[a.size()] == '.')) return true;
  return false;
}

// Keys of experiment.config that cannot move a gated metric, or are compared another way.
bool skipped_key(const std::string& key) {
  return key == "name" || key == "expect" || key == "execute.enabled" || key == "execute.repeats" ||
         key == "workload.path";
}

const nlohmann::json kAbsent = nlohmann::json::value_t::discarded;

std::string value_text(const nlohmann::json& v) { return v.is_discarded() ? "absent" : shown(v); }

// The first differing key under two config (sub)trees, in key order; maps recurse, anything else is
// one value. Keys in `by_content` (files compared by their digests instead) are skipped.
std::optional<ExperimentDifference> first_difference(const nlohmann::json& a, const nlohmann::json& b,
                                                     const std::string& prefix,
                                                     const std::vector<std::string>& allowed,
                                                     const std::set<std::string>& by_content) {
  if (a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (auto it = a.begin(); it != a.end(); ++it) keys.insert(it.key());
    for (auto it = b.begin(); it != b.end(); ++it) keys.insert(it.key());
    for (const std::string& k : keys) {
      const std::string path = prefix.empty() ? k : prefix + "." + k;
      if (skipped_key(path) || allowed_key(path, allowed) || by_content.count(path)) continue;
      const nlohmann::json& x = a.contains(k) ? a[k] : kAbsent;
      const nlohmann::json& y = b.contains(k) ? b[k] : kAbsent;
      if (auto d = first_difference(x, y, path, allowed, by_content)) return d;
    }
    return std::nullopt;
  }
  if (a == b && !a.is_discarded() && !b.is_discarded()) return std::nullopt;
  return ExperimentDifference{prefix, value_text(a), value_text(b)};
}

const nlohmann::json& at_path(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const nlohmann::json* at = &j;
  for (const char* k : path) {
    if (!at->is_object() || !at->contains(k)) return kAbsent;
    at = &(*at)[k];
  }
  return *at;
}

}  // namespace

bool names_config_key(const nlohmann::json& config, const std::string& key) {
  const nlohmann::json* at = &config;
  for (std::stringstream parts(key); parts.good();) {
    std::string part;
    std::getline(parts, part, '.');
    if (!at->is_object() || !at->contains(part)) return false;
    at = &(*at)[part];
  }
  return !key.empty();
}

namespace {

// The digest of each file of a result's `inputs` block, by key (defined below).
std::map<std::string, nlohmann::json> input_digests(const nlohmann::json& run);

// Feeds a config (sub)tree into an FNV-1a hash: keys in order, scalars by their JSON text, the keys in `skip`
// left out; nesting past `depth` is hashed by its type alone (a hostile baseline may nest 100000 deep; a config
// is 3 deep).
uint64_t hash_config(const nlohmann::json& j, const std::string& path, const std::set<std::string>& skip, uint64_t h,
                     int depth) {
  auto feed = [&](const std::string& text) {
    return fnv1a64(reinterpret_cast<const unsigned char*>(text.data()), text.size() + 1, h);
  };
  if (j.is_object() && depth > 0) {
    h = feed("{");
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string key = path.empty() ? it.key() : path + "." + it.key();
      if (skipped_key(key) || skip.count(key)) continue;
      h = fnv1a64(reinterpret_cast<const unsigned char*>(key.data()), key.size() + 1, h);
      h = hash_config(it.value(), key, skip, h, depth - 1);
    }
    return feed("}");
  }
  if (j.is_structured()) {
    if (depth > 0 && j.size() <= 4096) {
      h = feed("[");
      for (const auto& item : j) h = hash_config(item, path, skip, h, depth - 1);
      return feed("]");
    }
    return feed(j.type_name());
  }
  return feed(j.dump());
}

}  // namespace

std::string config_digest(const nlohmann::json& run) {
  const nlohmann::json& config = at_path(run, {"experiment", "config"});
  if (!config.is_object()) return "";
  // As experiment_difference compares: a file an experiment key names by its contents, not its path (which
  // moves with the checkout), a hardware profile by its values.
  const std::map<std::string, nlohmann::json> files = input_digests(run);
  std::set<std::string> by_content;
  for (const auto& [key, digest] : files) by_content.insert(key);
  uint64_t h = hash_config(config, "", by_content, kFnv1a64Offset, 8);
  auto feed = [&h](const std::string& text) {
    h = fnv1a64(reinterpret_cast<const unsigned char*>(text.data()), text.size() + 1, h);
  };
  for (const auto& [key, digest] : files)
    if (key != "workload.path" && key != "hardware") feed(key + "=" + (digest.is_string() ? digest.get<std::string>() : ""));
  const nlohmann::json& hw = at_path(run, {"hardware", "digest"});
  if (hw.is_string()) feed("hardware=" + hw.get<std::string>());
  const nlohmann::json& workload = at_path(run, {"workload", "file_digest"});
  if (workload.is_string()) feed("workload.path=" + workload.get<std::string>());
  return fnv1a64_text(h);
}

std::vector<StrategyPair> baseline_pairs(const Experiment& e, const nlohmann::json& baseline) {
  std::vector<std::string> labels;
  if (baseline.is_object() && baseline.contains("strategies") && baseline["strategies"].is_array())
    for (const auto& s : baseline["strategies"])
      if (s.is_object() && s.contains("strategy") && s["strategy"].is_string()) labels.push_back(s["strategy"].get<std::string>());
  const nlohmann::json& was = at_path(baseline, {"experiment", "config", "router", "gating"});
  const std::string now = to_string(e.router.gating);
  std::vector<StrategyPair> pairs;
  for (const std::string& label : labels) {
    const size_t space = label.find(' ');
    const std::string gating = label.substr(0, space), rest = space == std::string::npos ? "" : label.substr(space);
    const bool own = was.is_string() && gating == was.get<std::string>() && gating != now;
    const bool new_row_beside = std::find(labels.begin(), labels.end(), now + rest) != labels.end();
    pairs.push_back({own && !new_row_beside ? now + rest : label, label});
  }
  return pairs;
}

const std::vector<std::string>& default_baseline_metrics() {
  static const std::vector<std::string> m = {"imbalance",    "drop_rate",           "tokens_unrouted", "cv",
                                             "entropy_norm", "batching_efficiency", "modeled_time_s"};
  return m;
}

bool is_measured(const std::string& metric) { return metric.rfind("measured_", 0) == 0; }

bool is_count_metric(const std::string& m) {
  static const std::set<std::string> counts = {"dropped",        "tokens_unrouted", "padding_waste",
                                               "active_experts", "dead_experts",    "capacity"};
  return counts.count(m) > 0;
}

std::vector<std::string> baseline_metrics(const Experiment& e, const std::vector<std::string>& requested) {
  const std::vector<std::string>& known = scalar_metric_names();
  std::vector<std::string> out;
  auto add = [&](const std::string& m) {
    if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  };
  if (!requested.empty()) {
    for (const std::string& m : requested) {
      if (std::find(known.begin(), known.end(), m) == known.end()) {
        std::string names;
        for (const std::string& k : known)
          if (!is_measured(k)) names += (names.empty() ? "" : ", ") + k;
        fail("--metrics: expected metric names from " + names + ", got '" + m + "'");
      }
      if (is_measured(m))
        fail("--metrics: " + m + " depends on the machine's load, so no baseline compares it; bound it in expect:");
      add(m);
    }
    return out;
  }
  for (const Expectation& x : e.expect)
    if (!is_measured(x.metric)) add(x.metric);
  return out.empty() ? default_baseline_metrics() : out;
}

namespace {

// The digest of each file of a result's `inputs` block, by key; malformed entries are left out.
std::map<std::string, nlohmann::json> input_digests(const nlohmann::json& run) {
  std::map<std::string, nlohmann::json> out;
  const nlohmann::json& inputs = at_path(run, {"inputs"});
  if (!inputs.is_array()) return out;
  for (const nlohmann::json& f : inputs)
    if (f.is_object() && f.contains("key") && f["key"].is_string() && f.contains("digest"))
      out[f["key"].get<std::string>()] = f["digest"];
  return out;
}

}  // namespace

std::optional<ExperimentDifference> experiment_difference(const nlohmann::json& baseline, const nlohmann::json& run,
                                                          const std::vector<std::string>& allowed) {
  // A file an experiment key names is compared by its contents (the inputs block), not by its path, which
  // moves with the checkout.
  const std::map<std::string, nlohmann::json> was_files = input_digests(baseline), now_files = input_digests(run);
  std::set<std::string> by_content;
  for (const auto& [key, digest] : now_files) by_content.insert(key);
  for (const auto& [key, digest] : was_files) by_content.insert(key);
  if (auto d = first_difference(at_path(baseline, {"experiment", "config"}), at_path(run, {"experiment", "config"}),
                                "", allowed, by_content))
    return d;
  // The workload's file is compared by workload.file_digest below, a hardware profile file by its values
  // (hardware.digest: its notes may change).
  by_content.erase("workload.path");
  by_content.erase("hardware");
  for (const std::string& key : by_content) {
    if (allowed_key(key, allowed)) continue;
    const auto w = was_files.find(key), n = now_files.find(key);
    const nlohmann::json& was = w == was_files.end() ? kAbsent : w->second;
    const nlohmann::json& now = n == now_files.end() ? kAbsent : n->second;
    if (was != now || was.is_discarded() != now.is_discarded())
      return ExperimentDifference{key + " (the file's contents)", value_text(was), value_text(now)};
  }
  if (!allowed_key("workload.path", allowed)) {
    const nlohmann::json& was = at_path(baseline, {"workload", "file_digest"});
    const nlohmann::json& now = at_path(run, {"workload", "file_digest"});
    if (was != now || was.is_discarded() != now.is_discarded())
      return ExperimentDifference{"workload.path (the file's contents)", value_text(was), value_text(now)};
  }
  if (!allowed_key("hardware", allowed)) {
    const nlohmann::json& was = at_path(baseline, {"hardware", "digest"});
    const nlohmann::json& now = at_path(run, {"hardware", "digest"});
    if (was != now || was.is_discarded() != now.is_discarded())
      return ExperimentDifference{"hardware (the profile's values)", value_text(was), value_text(now)};
  }
  return std::nullopt;
}

std::string CheckFailure::line() const {
  return file + ": " + strategy + ": " + metric + " = " + num(value) + ", expected " + bound;
}

int metric_direction(const std::string& m) {
  static const std::set<std::string> higher = {"entropy_norm", "active_experts", "bottom20_share",
                                               "batching_efficiency"};
  static const std::set<std::string> lower = {"imbalance",      "max_vio",          "demand_imbalance", "cv",
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

std::vector<CheckFailure> failures_of(const std::vector<CheckComparison>& comparisons) {
  std::vector<CheckFailure> failures;
  for (const CheckComparison& c : comparisons)
    for (const CheckedMetric& m : c.metrics)
      if (!m.passed) failures.push_back({c.file, c.strategy, m.metric, m.value, m.bound});
  return failures;
}

std::vector<CheckComparison> expectation_comparisons(const RunResult& run, const std::string& config_digest) {
  std::vector<CheckComparison> out;
  const std::string& file = run.experiment.source_file;
  auto comparison_of = [&](const std::string& strategy) -> CheckComparison& {
    for (CheckComparison& c : out)
      if (c.strategy == strategy) return c;
    out.push_back({file, strategy, config_digest, "", "", "", {}});
    return out.back();
  };
  for (const Expectation& x : run.experiment.expect) {
    for (const VariantResult& v : run.variants) {
      if (!matches(x.strategy, v)) continue;
      CheckComparison& c = comparison_of(v.variant.label);
      const std::string name = x.aggregate == "value" ? x.metric : x.metric + "." + x.aggregate;
      const std::optional<double> value = metric_value(run, v, x.metric, x.aggregate);
      if (!value) {
        c.metrics.push_back({name, NAN, NAN, "a value, but this run does not produce it", false});
        continue;
      }
      if (x.min) c.metrics.push_back({name, *value, NAN, "min " + num(*x.min), *value >= *x.min});
      if (x.max) c.metrics.push_back({name, *value, NAN, "max " + num(*x.max), *value <= *x.max});
    }
  }
  return out;
}

std::vector<CheckFailure> check_expectations(const RunResult& run) {
  return failures_of(expectation_comparisons(run, ""));
}

std::vector<std::string> baseline_labels(const nlohmann::json& b, const std::string& name) {
  // Another command's result of this schema is named as such before its shape is judged.
  const nlohmann::json& command = at_path(b, {"provenance", "command"});
  const bool this_schema = b.is_object() && b.contains("schema_version") && b["schema_version"] == kReportSchemaVersion;
  if (this_schema && command.is_string() && !is_run_result_command(command.get<std::string>()))
    fail(name + ": provenance.command: expected the JSON of moesim run, compare or check, got a result of moesim " +
         command.get<std::string>().substr(0, 40));
  const std::vector<std::string> labels = run_result_labels(b, name);
  if (!command.is_string())
    fail(name + ": provenance.command: expected the command that wrote the baseline (run, compare or check)");
  return labels;
}

std::vector<std::string> run_result_labels(const nlohmann::json& b, const std::string& name) {
  if (!b.is_object() || !b.contains("schema_version"))
    fail(name + ": expected a moesim run JSON (schema_version, strategies[]), got something else");
  if (b["schema_version"] != kReportSchemaVersion) {
    const nlohmann::json& v = b["schema_version"];
    const bool older = v.is_number_integer() && v.get<int64_t>() < kReportSchemaVersion;
    fail(name + ": schema_version: expected " + std::to_string(kReportSchemaVersion) + ", got " + shown(v) +
         (older ? " (an older moesim wrote it: write it again with this one, e.g. check --update-baseline)" : ""));
  }
  if (!b.contains("strategies") || !b["strategies"].is_array())
    fail(name + ": expected a moesim run JSON (schema_version, strategies[]), got something else");
  if (!at_path(b, {"experiment", "config"}).is_object())
    fail(name + ": experiment.config: expected the effective experiment the result was run from");
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
    fail(name + ": expected JSON written by moesim run/compare/check, got invalid JSON: " + json_error_text(e.what()));
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

const std::vector<std::string>& baseline_aggregates() {
  static const std::vector<std::string> a = {"value", "last", "mean", "p50", "p95", "max"};
  return a;
}

namespace {

// The baseline's value of `metric` under `aggregate` in one strategies[] entry (check_against_baseline).
const nlohmann::json& baseline_value(const nlohmann::json& s, const std::string& metric, const std::string& aggregate) {
  const nlohmann::json& headline = s["metrics"].contains(metric) ? s["metrics"][metric] : kAbsent;
  if (aggregate == "value") return headline;
  if (aggregate == "last") {
    const nlohmann::json& last = at_path(s, {"last_record_metrics"});
    return last.is_object() ? (last.contains(metric) ? last[metric] : kAbsent) : headline;
  }
  const nlohmann::json& agg = at_path(s, {"aggregates"});
  if (agg.is_object() && agg.contains(metric) && agg[metric].is_object() && agg[metric].contains(aggregate))
    return agg[metric][aggregate];
  return headline;  // one batch or record, or a run-level metric: every aggregate is its one value
}

}  // namespace

std::vector<CheckComparison> baseline_comparisons(const RunResult& run, const std::string& config_digest,
                                                  const nlohmann::json& baseline, const std::string& baseline_name,
                                                  const std::vector<StrategyPair>& pairs,
                                                  const std::vector<std::string>& metrics, double rtol, double atol,
                                                  const std::string& aggregate) {
  std::vector<CheckComparison> out;
  if (std::find(baseline_aggregates().begin(), baseline_aggregates().end(), aggregate) == baseline_aggregates().end())
    fail("--aggregate: expected value, last, mean, p50, p95 or max, got '" + aggregate + "'");
  const std::string was_digest = moesim::config_digest(baseline);
  for (const auto& s : baseline["strategies"]) {
    const std::string label = s["strategy"].get<std::string>();
    for (const StrategyPair& pair : pairs) {
      if (pair.baseline_label != label) continue;
      for (const VariantResult& v : run.variants) {
        if (v.variant.label != pair.run_label) continue;
        CheckComparison c{run.experiment.source_file, v.variant.label, config_digest, baseline_name, label, was_digest, {}};
        // Against another strategy than the run's own, every bound says whose value it is.
        const std::string whose = label == v.variant.label ? "" : "the baseline's " + label + "; ";
        for (const std::string& metric : metrics) {
          const std::string shown_name = aggregate == "value" ? metric : metric + "." + aggregate;
          const nlohmann::json& base = baseline_value(s, metric, aggregate);
          const std::optional<double> now = metric_value(run, v, metric, aggregate);
          if (!base.is_number() && !now) continue;  // the metric does not apply to this strategy
          if (!base.is_number() || !now) {
            c.metrics.push_back({shown_name, now ? *now : NAN, base.is_number() ? base.get<double>() : NAN,
                                 std::string(now ? "no value, as in the baseline" : "a value, as in the baseline (") +
                                     (now ? "" : whose + num(base.get<double>()) + ")"),
                                 false});
            continue;
          }
          const double was = base.get<double>();
          const bool exact = is_count_metric(metric);
          const double slack = exact ? 0.0 : atol + rtol * std::fabs(was);
          const int dir = metric_direction(metric);
          const bool worse =
              dir < 0 ? *now > was + slack : dir > 0 ? *now < was - slack : std::fabs(*now - was) > slack;
          const std::string how = dir < 0 ? "at most" : dir > 0 ? "at least" : "equal to";
          const std::string tolerance = exact ? "exact count" : "rtol " + num(rtol) + ", atol " + num(atol);
          c.metrics.push_back({shown_name, *now, was, how + " baseline " + num(was) + " (" + whose + tolerance + ")",
                               !worse});
        }
        out.push_back(std::move(c));
      }
    }
  }
  return out;
}

std::vector<CheckFailure> check_against_baseline(const RunResult& run, const nlohmann::json& baseline,
                                                 const std::vector<std::string>& metrics, double rtol, double atol,
                                                 const std::string& aggregate) {
  std::vector<StrategyPair> pairs;
  for (const auto& s : baseline["strategies"]) {
    const std::string label = s["strategy"].get<std::string>();
    pairs.push_back({label, label});
  }
  return failures_of(baseline_comparisons(run, "", baseline, "", pairs, metrics, rtol, atol, aggregate));
}

}  // namespace moesim
