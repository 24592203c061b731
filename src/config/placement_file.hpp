// Expert placements as inference engines load them (docs/workloads.md "Placements engines load"): the
// physical-to-logical map of every layer, read from the file `moesim plan` writes in any of its formats.
//   moesim:  {"moesim_plan": 1, "devices": D, "layers": [{"layer": L, "physical_to_logical": [S ints], ...}]}
//   vllm:    [[S ints] per MoE layer] (one flat [S ints] list: the same map on every layer)
//   sglang:  {"physical_to_logical_map": [[S ints] per decoder layer]}
//   trtllm:  num_slots: S, initial_global_assignments: {LAYER: [S ints]}, layer_updates_per_iter: 0
// Every engine puts slot s on the GPU s / (S / D). Parsed with yaml-cpp (JSON is YAML); errors are ConfigError
// naming the file and what was expected. Host only. Covered by tests/config/placement_file_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moesim {

enum class PlacementFileFormat { moesim, vllm, sglang, trtllm };
const char* to_string(PlacementFileFormat f);

struct PlacementFile {
  PlacementFileFormat format = PlacementFileFormat::moesim;
  std::vector<int> layers;                         // the layer numbers as the file numbers them, ascending
  std::vector<std::vector<int32_t>> slot_expert;  // [layers][S] the logical expert of each physical slot
};

// The file's maps; `name` stands for the file in messages.
PlacementFile parse_placement_file(const std::string& text, const std::string& name);
PlacementFile read_placement_file(const std::string& path);

// The map of layer `layer` of `f` (-1: its first layer); ConfigError naming `name` when the file has no such layer.
const std::vector<int32_t>& placement_file_layer(const PlacementFile& f, int layer, const std::string& name);

}  // namespace moesim
