// `moesim plan`'s output: an expert-parallel plan per layer as the file an engine loads
// (src/config/placement_file.hpp reads every one back): moesim's JSON (the plan with its loads), vLLM's
// per-MoE-layer physical-to-logical lists, SGLang's --init-expert-location JSON and TensorRT-LLM's
// moe_load_balancer YAML. Sources and layer numbering: docs/workloads.md "Placements engines load".
// Host only. Covered by tests/cli/plan_test.cpp.
#pragma once

#include <string>
#include <vector>

#include "src/config/placement_file.hpp"
#include "src/cost/placement.hpp"

namespace moesim {

struct PlannedLayer {
  int layer = 0;                  // the layer number of the loads
  ExpertPlacement placement;      // the plan, its slots' integer loads assigned
};

struct Plan {
  std::string source;             // the loads' file
  int experts = 0, devices = 0, replicas = 0, nodes = 1;
  std::string policy;
  int decoder_layers = 0;         // SGLang's rows: every decoder layer 0..decoder_layers-1
  std::vector<PlannedLayer> layers;
};

// The plan as `format`'s file text. SGLang lists every decoder layer: a layer without loads gets the
// engine's trivial map (slot s holds expert s mod E).
std::string format_plan(const Plan& plan, PlacementFileFormat format);

}  // namespace moesim
