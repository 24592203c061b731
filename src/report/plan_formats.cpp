// Plan files for engines (see plan_formats.hpp).
#include "src/report/plan_formats.hpp"

#include <algorithm>
#include <sstream>

#include <nlohmann/json.hpp>

#include "src/report/provenance.hpp"
#include "src/report/report.hpp"

namespace moesim {
namespace {

std::string int_list(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::vector<int32_t> trivial_map(int slots, int experts) {
  std::vector<int32_t> m(static_cast<size_t>(slots));
  for (int s = 0; s < slots; ++s) m[s] = s % experts;
  return m;
}

}  // namespace

std::string format_plan(const Plan& plan, PlacementFileFormat format) {
  const int slots = plan.experts + plan.replicas;
  switch (format) {
    case PlacementFileFormat::moesim: {
      nlohmann::json layers = nlohmann::json::array();
      for (const PlannedLayer& l : plan.layers) {
        const std::vector<double> dl = device_plan_load(l.placement);
        nlohmann::json j = plan_json(l.placement, dl, balancedness_of(dl), balancedness_of(dl));
        j["layer"] = l.layer;
        j["physical_to_logical"] = l.placement.expert;
        j["load"] = l.placement.load;
        layers.push_back(j);
      }
      const nlohmann::json doc = {{"moesim_plan", 1},
                                  {"schema_version", kReportSchemaVersion},
                                  {"moesim_version", MOESIM_VERSION},
                                  {"source", plan.source},
                                  {"experts", plan.experts},
                                  {"devices", plan.devices},
                                  {"replicas", plan.replicas},
                                  {"slots", slots},
                                  {"nodes", plan.nodes},
                                  {"policy", plan.policy},
                                  {"layers", layers},
                                  {"provenance", provenance_json()}};
      return doc.dump(2) + "\n";
    }
    case PlacementFileFormat::vllm: {
      std::string s = "[\n";
      for (size_t i = 0; i < plan.layers.size(); ++i)
        s += "  " + int_list(plan.layers[i].placement.expert) + (i + 1 < plan.layers.size() ? ",\n" : "\n");
      return s + "]\n";
    }
    case PlacementFileFormat::sglang: {
      int rows = plan.decoder_layers;
      for (const PlannedLayer& l : plan.layers) rows = std::max(rows, l.layer + 1);
      std::string s = "{\"physical_to_logical_map\": [\n";
      for (int r = 0; r < rows; ++r) {
        auto it = std::find_if(plan.layers.begin(), plan.layers.end(), [r](const PlannedLayer& l) { return l.layer == r; });
        s += "  " + int_list(it != plan.layers.end() ? it->placement.expert : trivial_map(slots, plan.experts)) +
             (r + 1 < rows ? ",\n" : "\n");
      }
      return s + "]}\n";
    }
    case PlacementFileFormat::trtllm: {
      std::ostringstream s;
      s << "# moesim plan of " << plan.source << ": " << plan.devices << " ranks, " << slots << " slots ("
        << plan.replicas << " redundant), policy " << plan.policy << "\n";
      s << "# TensorRT-LLM: moe_config: {backend: WideEP, load_balancer: THIS_FILE}\n";
      s << "num_slots: " << slots << "\n";
      s << "layer_updates_per_iter: 0\n";
      s << "initial_global_assignments:\n";
      for (const PlannedLayer& l : plan.layers) s << "  " << l.layer << ": " << int_list(l.placement.expert) << "\n";
      return s.str();
    }
  }
  return "";
}

}  // namespace moesim
