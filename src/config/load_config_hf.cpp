// model.hf_config in the load: the config.json's values (src/config/hf_config.hpp) put in the Experiment
// for every key the experiment file and the --set did not give (their origins are the Loader's record; the
// built-in experiment's keys are defaults and give way), each
// read through the key's own reader of the schema table, so that its bounds hold and its error names the
// config.json and the JSON key ("FILE: JSON_KEY: model.KEY: expected ..., got ..."); then model.moe_layers from
// the family's dense-layer pattern over the resolved model.layers. Deterministic, host only. Declared in
// src/config/load_config_internal.hpp; covered by tests/config/hf_config_test.cpp.
#include <yaml-cpp/yaml.h>

#include <string>

#include "src/common/error.hpp"
#include "src/config/hf_config.hpp"
#include "src/config/load_config_internal.hpp"

namespace moesim {
namespace config_detail {

void Loader::apply_hf_config(Experiment& e) {
  HfConfig hf;
  try {
    hf = read_hf_config_file(e.model.hf_config);
  } catch (const ConfigError& ex) {
    ConfigError named(origin({"model.hf_config"}) + ": model.hf_config: " + ex.what());
    named.missing_file = ex.missing_file;
    throw named;
  }
  // A key the experiment file or a --set gave wins over the config.json. The built-in experiment is no file
  // of the user's: its keys are defaults, which the config.json replaces (only a --set wins there).
  const bool built_in = source() == "<built-in>";
  auto given = [&](const std::string& path) {
    const auto it = origins_.find(path);
    return it != origins_.end() && (!built_in || it->second.rfind("--set ", 0) == 0);
  };
  e.model.hf_config_keys.clear();
  for (const HfValue& v : hf.values) {
    if (given(v.path)) continue;
    const std::string at = hf.source + ": " + v.json_key;
    if (!v.error.empty()) throw ConfigError(at + ": " + v.error);
    const size_t dot = v.path.find('.');
    const Section* s = find_section(v.path.substr(0, dot));
    const Field* f = s ? s->find(v.path.substr(dot + 1)) : nullptr;
    if (!f) throw PreconditionError("hf_config gives " + v.path + ", which is not a key of the schema table");
    f->read(*this, YAML::Node(v.value), v.path, at, e);
    origins_[v.path] = at;
    e.model.hf_config_keys.push_back(v.path);
  }
  // The built-in experiment's workload.skew (0.15) is calibrated to Mixtral-8x7B's recorded loads
  // (docs/workloads.md, "Synthetic skew against recorded loads"): the model's own calibration replaces it
  // where the project has one, else the built-in's is kept and the user is told so.
  if (built_in && !given("workload.skew") && hf.model_type != "mixtral") {
    // OLMoE: a Zipf skew against its recorded loads; DeepSeek-V3: configs/deepseek-v3.yaml's popularity, against
    // SGLang's GPU balancedness of its real routing.
    struct Calibration {
      const char* type;
      Popularity popularity;
      double skew, group_skew, batch_variation;
    };
    static const Calibration kCalibrated[] = {{"olmoe", Popularity::zipf, 0.4, 0, 0},
                                              {"deepseek_v3", Popularity::lognormal, 0.24, 0.13, 0.2}};
    bool found = false;
    for (const Calibration& c : kCalibrated) {
      if (hf.model_type != c.type) continue;
      e.workload.skew = c.skew;
      origins_["workload.skew"] = hf.source + ": model_type";
      if (!given("workload.popularity")) e.workload.popularity = c.popularity;
      if (!given("workload.group_skew")) e.workload.group_skew = c.group_skew;
      if (!given("workload.batch_variation")) e.workload.batch_variation = c.batch_variation;
      found = true;
    }
    if (!found) {
      e.load_notes.push_back("model.hf_config " + hf.source + " (" + hf.model_type +
                             ") on the built-in experiment: workload.skew " + format_double(e.workload.skew) +
                             " is Mixtral-8x7B's calibration and is kept (none is known for " + hf.model_type +
                             "; docs/workloads.md; set workload.skew)");
    }
  }
  // The built-in experiment's expert-parallel placement (8 devices) is no choice of the user's: where the
  // model's experts do not split over it, it takes the most devices up to its own that they split over, and
  // says so (a placement the user gave is checked as given, its error naming the key).
  const PlacementConfig& p = e.placement;
  const int slots = e.model.experts + p.replicas;
  if (built_in && !given("placement.devices") && p.kind == PlacementKind::expert_parallel &&
      plans_from_loads(p) && p.devices > 1 &&
      slots % p.devices != 0) {
    int devices = p.devices;
    while (devices > 1 && slots % devices != 0) --devices;
    e.load_notes.push_back("model.hf_config " + hf.source + ": its " + std::to_string(e.model.experts) +
                           " experts do not split over the built-in experiment's " + std::to_string(p.devices) +
                           " devices: placement.devices " + std::to_string(devices) + " (set placement.devices)");
    e.placement.devices = devices;
    origins_["placement.devices"] = hf.source + ": the model's experts over the built-in placement";
  }
  if (!given("model.moe_layers")) {
    const HfLayerPattern& p = hf.moe_layers;
    const std::string at = hf.source + ": " + p.json_key;
    if (!p.error.empty()) throw ConfigError(at + ": " + p.error);
    const int64_t n = p.count(e.model.layers);
    if (n < 1) {
      fail_expected(at, "model.moe_layers",
                    "at least one MoE layer among the " + std::to_string(e.model.layers) + " layers (model.layers)", "0");
    }
    e.model.moe_layers = static_cast<int>(n);
    origins_["model.moe_layers"] = at;
    e.model.hf_config_keys.push_back("model.moe_layers");
  }
}

}  // namespace config_detail
}  // namespace moesim
