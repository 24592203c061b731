// Test support for tests/cost: the toy accelerator the placement, rebalancing and tensor-parallel
// tests work their numbers out on by hand. Host only, header-only.
#pragma once

#include <string>

#include "src/cost/hardware_profile.hpp"

namespace moesim::test {

// F = 10 TFLOP/s fp16, BW = 1 TB/s, 4 SMs, 16x16 tiles, 1 us launches; links 100 GB/s, 1 us latency.
// `extra`: more profile keys (YAML lines).
inline HardwareProfile toy_profile(const std::string& extra = "") {
  return parse_hardware_profile("name: toy\npeak_tflops: {fp16: 10}\nmemory_bandwidth_gbs: 1000\nsm_count: 4\n"
                                "tile_m: 16\ntile_n: 16\nlaunch_overhead_us: 1\nlink_bandwidth_gbs: 100\n"
                                "link_latency_us: 1\n" + extra,
                                "toy.yaml");
}

}  // namespace moesim::test
