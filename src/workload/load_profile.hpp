// Per-expert load profiles recorded from real models (`workload.source: load_profile`): a JSON object
// {KEY: {LAYER: [count of expert 0, ..., count of expert E-1], ...}, ...}, optionally wrapped as
// {"data": {...}} (data/routing-traces/olmoe-mixtral-expert-counts/expert_counts.json), where KEY is a
// flat name ("mistral/expert_counts/arxiv") or a '/'-separated path through nested objects. Layers are
// returned in numeric order. Errors: InputError naming the file, the key and what was expected.
// Host only, deterministic. Covered by tests/workload/load_profile_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moesim {

struct LoadProfile {
  std::string key;
  std::vector<int> layers;                   // [num_layers] layer numbers, ascending
  std::vector<std::vector<int64_t>> counts;  // [num_layers][num_experts] assignments per expert
};

// key may be empty when the file holds exactly one profile.
LoadProfile parse_load_profile(const std::string& json_text, const std::string& name, const std::string& key,
                               int num_experts);
LoadProfile read_load_profile(const std::string& path, const std::string& key, int num_experts);

// Scales counts to `total` assignments with the largest-remainder rule (ties: lower expert): the expected
// loads of a batch of total / top_k tokens drawn from the profile; the result sums to total exactly.
// An all-zero profile spreads total evenly (the balanced rule: expert e gets one extra when e < total mod E).
std::vector<int64_t> scale_loads(const std::vector<int64_t>& counts, int64_t total);

}  // namespace moesim
