// Engine placement files (see placement_file.hpp).
#include "src/config/placement_file.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "src/common/error.hpp"

namespace moesim {
namespace {

constexpr int64_t kMaxSlots = 1 << 20;

[[noreturn]] void bad(const std::string& name, const std::string& what) {
  throw ConfigError(name + ": " + what);
}

std::vector<int32_t> slot_list(const YAML::Node& n, const std::string& name, const std::string& where) {
  if (!n.IsSequence() || n.size() == 0)
    bad(name, where + ": expected a non-empty list of logical expert ids, one per physical slot");
  if (static_cast<int64_t>(n.size()) > kMaxSlots) bad(name, where + ": expected at most 1048576 slots");
  std::vector<int32_t> out;
  out.reserve(n.size());
  for (size_t i = 0; i < n.size(); ++i) {
    int64_t v = -1;
    try {
      if (n[i].IsScalar()) v = n[i].as<int64_t>();
    } catch (const YAML::Exception&) {
      v = -1;
    }
    if (v < 0 || v >= kMaxSlots)
      bad(name, where + "[" + std::to_string(i) + "]: expected a logical expert id >= 0, got " +
                    (n[i].IsScalar() ? "'" + n[i].Scalar() + "'" : std::string("a list or map")));
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

int layer_number(const YAML::Node& n, const std::string& name, const std::string& where) {
  int64_t v = -1;
  try {
    if (n.IsScalar()) v = n.as<int64_t>();
  } catch (const YAML::Exception&) {
    v = -1;
  }
  if (v < 0 || v > std::numeric_limits<int32_t>::max())
    bad(name, where + ": expected a layer number >= 0, got " + (n.IsScalar() ? "'" + n.Scalar() + "'" : "a list or map"));
  return static_cast<int>(v);
}

// Rows of the same width, numbered 0..n-1.
void add_rows(PlacementFile& f, const YAML::Node& rows, const std::string& name, const std::string& key) {
  if (!rows.IsSequence() || rows.size() == 0) bad(name, key + ": expected a non-empty list of per-layer lists");
  for (size_t l = 0; l < rows.size(); ++l) {
    f.layers.push_back(static_cast<int>(l));
    f.slot_expert.push_back(slot_list(rows[l], name, key + "[" + std::to_string(l) + "]"));
  }
}

}  // namespace

const char* to_string(PlacementFileFormat f) {
  switch (f) {
    case PlacementFileFormat::moesim: return "moesim";
    case PlacementFileFormat::vllm: return "vllm";
    case PlacementFileFormat::sglang: return "sglang";
    case PlacementFileFormat::trtllm: return "trtllm";
  }
  return "?";
}

PlacementFile parse_placement_file(const std::string& text, const std::string& name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& ex) {
    bad(name, std::string("expected a placement file (JSON or YAML), got a parse error: ") + ex.what());
  }
  PlacementFile f;
  if (root.IsSequence()) {
    f.format = PlacementFileFormat::vllm;
    if (root.size() > 0 && root[0].IsScalar()) {  // one map for every layer
      f.layers.push_back(0);
      f.slot_expert.push_back(slot_list(root, name, "the map"));
    } else {
      add_rows(f, root, name, "the per-layer maps");
    }
  } else if (root.IsMap() && root["physical_to_logical_map"]) {
    f.format = PlacementFileFormat::sglang;
    add_rows(f, root["physical_to_logical_map"], name, "physical_to_logical_map");
  } else if (root.IsMap() && root["initial_global_assignments"]) {
    f.format = PlacementFileFormat::trtllm;
    const YAML::Node a = root["initial_global_assignments"];
    if (!a.IsMap() || a.size() == 0) bad(name, "initial_global_assignments: expected a map of layer -> slot list");
    std::vector<std::pair<int, std::vector<int32_t>>> rows;
    for (const auto& kv : a) {
      const int layer = layer_number(kv.first, name, "initial_global_assignments key");
      rows.emplace_back(layer, slot_list(kv.second, name, "initial_global_assignments[" + std::to_string(layer) + "]"));
    }
    std::sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    for (auto& [layer, slots] : rows) {
      if (!f.layers.empty() && f.layers.back() == layer)
        bad(name, "initial_global_assignments: layer " + std::to_string(layer) + " twice");
      f.layers.push_back(layer);
      f.slot_expert.push_back(std::move(slots));
    }
    if (root["num_slots"]) {
      const int64_t slots = layer_number(root["num_slots"], name, "num_slots");
      for (size_t l = 0; l < f.layers.size(); ++l)
        if (static_cast<int64_t>(f.slot_expert[l].size()) != slots)
          bad(name, "initial_global_assignments[" + std::to_string(f.layers[l]) + "]: expected num_slots = " +
                        std::to_string(slots) + " entries, got " + std::to_string(f.slot_expert[l].size()));
    }
  } else if (root.IsMap() && root["moesim_plan"]) {
    f.format = PlacementFileFormat::moesim;
    const YAML::Node layers = root["layers"];
    if (!layers || !layers.IsSequence() || layers.size() == 0) bad(name, "layers: expected a non-empty list");
    for (size_t i = 0; i < layers.size(); ++i) {
      const std::string where = "layers[" + std::to_string(i) + "]";
      if (!layers[i].IsMap() || !layers[i]["layer"] || !layers[i]["physical_to_logical"])
        bad(name, where + ": expected {layer, physical_to_logical, ...}");
      const int layer = layer_number(layers[i]["layer"], name, where + ".layer");
      if (!f.layers.empty() && layer <= f.layers.back()) bad(name, where + ".layer: expected ascending layer numbers");
      f.layers.push_back(layer);
      f.slot_expert.push_back(slot_list(layers[i]["physical_to_logical"], name, where + ".physical_to_logical"));
    }
  } else {
    bad(name, "expected a placement file: a JSON list of per-layer maps (vllm), {\"physical_to_logical_map\": ...} "
              "(sglang), initial_global_assignments (trtllm) or moesim plan's JSON");
  }
  for (size_t l = 1; l < f.slot_expert.size(); ++l)
    if (f.slot_expert[l].size() != f.slot_expert[0].size())
      bad(name, "layer " + std::to_string(f.layers[l]) + ": expected " + std::to_string(f.slot_expert[0].size()) +
                    " slots like layer " + std::to_string(f.layers[0]) + ", got " +
                    std::to_string(f.slot_expert[l].size()));
  return f;
}

PlacementFile read_placement_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) bad(path, "expected a placement file, got a folder");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw open_failure<ConfigError>(path, path + ": cannot open the placement file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) bad(path, "cannot read the placement file");
  return parse_placement_file(text.str(), path);
}

const std::vector<int32_t>& placement_file_layer(const PlacementFile& f, int layer, const std::string& name) {
  if (layer < 0) return f.slot_expert.front();
  for (size_t l = 0; l < f.layers.size(); ++l)
    if (f.layers[l] == layer) return f.slot_expert[l];
  std::string have;
  for (int x : f.layers) have += (have.empty() ? "" : ", ") + std::to_string(x);
  bad(name, "expected layer " + std::to_string(layer) + " in the placement file, which has layers " + have);
}

}  // namespace moesim
