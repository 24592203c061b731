// Test support for tests/cost: the toy accelerator the placement, rebalancing and tensor-parallel
// tests work their numbers out on by hand. Host only, header-only.
#pragma once

#include <string>

#include "src/cost/hardware_profile.hpp"

namespace moesim::test {

// The kernel model's fitted figures at their ideal (efficiencies 1, no K-step floor) unless `extra` sets
// them: a profile without them would take the pooled fit, and the hand-worked numbers assume the roofline.
inline std::string ideal_figures(const std::string& extra) {
  std::string out;
  for (const char* key : {"efficiency_bw", "efficiency_flops"})
    if (extra.find(key) == std::string::npos) out += std::string(key) + ": 1\n";
  if (extra.find("k_step_us") == std::string::npos) out += "k_step_us: 0\n";
  return out;
}

// F = 10 TFLOP/s fp16, BW = 1 TB/s, 4 SMs, 16x16 tiles, 1 us launches; links 100 GB/s, 1 us latency;
// efficiencies 1 and no K-step floor. `extra`: more profile keys (YAML lines).
inline HardwareProfile toy_profile(const std::string& extra = "") {
  return parse_hardware_profile("name: toy\npeak_tflops: {fp16: 10}\nmemory_bandwidth_gbs: 1000\nsm_count: 4\n"
                                "tile_m: 16\ntile_n: 16\nlaunch_overhead_us: 1\nlink_bandwidth_gbs: 100\n"
                                "link_latency_us: 1\n" + ideal_figures(extra) + extra,
                                "toy.yaml");
}

}  // namespace moesim::test
