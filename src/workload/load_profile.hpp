// Per-expert load profiles recorded from real models (`workload.source: load_profile`): a JSON object
// {KEY: {LAYER: [count of expert 0, ..., count of expert E-1], ...}, ...}, optionally wrapped as
// {"data": {...}} (data/routing-traces/olmoe-mixtral-expert-counts/expert_counts.json), where KEY is a
// flat name ("mistral/expert_counts/arxiv") or a '/'-separated path through nested objects. Layers are
// returned in numeric order. Errors: InputError naming the file, the key and what was expected.
// read_load_profile_file also reads Megatron-Core expert-load dumps and Megatron-LM router traces
// (megatron_loads.hpp), recognised by content or forced by workload.format, and folds physical expert slots into logical experts (workload.expert_map).
// Host only, deterministic. Covered by tests/workload/load_profile_test.cpp, megatron_loads_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"

namespace moesim {

struct LoadProfile {
  std::string key;
  std::vector<int> layers;                   // [num_layers] layer numbers, ascending
  std::vector<std::vector<int64_t>> counts;  // [num_layers][num_experts] assignments per expert
  LoadFormat format = LoadFormat::moesim_json;  // the format read
  bool format_forced = false;                   // true: workload.format named it; false: recognised by content
};

// The format of a load-profile file from its first bytes: "PK\x03\x04" (a zip: a Megatron .npz); '{' after
// blanks, and the first line a JSON object with "top_indices" (a Megatron-LM router trace); other text from
// '{' (moesim's JSON); otherwise an InputError naming the file and workload.format.
LoadFormat detect_load_format(const std::string& bytes, const std::string& name);
// The same from the file's first non-blank line, read alone.
LoadFormat detect_load_format_of_file(const std::string& path);

// Folds counts of P physical expert slots into num_experts logical experts: out[map[p]] += counts[p].
// map: [P] logical expert per slot, each in [0, num_experts), every logical expert at least once.
std::vector<int64_t> fold_expert_map(const std::vector<int64_t>& counts, const std::vector<int>& map, int num_experts,
                                     const std::string& name);

// Reads `path` as `format` (detect: by content). With an empty expert_map the file must count num_experts
// experts per layer (0: as many as its first layer counts; a router trace needs the number); with one, it counts
// expert_map.size() physical slots, folded into num_experts.
// top_k: a router trace's recorded topk must equal it (0: not checked; the other formats record none).
LoadProfile read_load_profile_file(const std::string& path, LoadFormat format, const std::string& key, int num_experts,
                                   const std::vector<int>& expert_map, int top_k = 0);

// key may be empty when the file holds exactly one profile; num_experts 0: as many as the first layer counts.
LoadProfile parse_load_profile(const std::string& json_text, const std::string& name, const std::string& key,
                               int num_experts);
LoadProfile read_load_profile(const std::string& path, const std::string& key, int num_experts);

// Scales counts to `total` assignments with the largest-remainder rule (ties: lower expert): the expected
// loads of a batch of total / top_k tokens drawn from the profile; the result sums to total exactly.
// An all-zero profile spreads total evenly (the balanced rule: expert e gets one extra when e < total mod E).
std::vector<int64_t> scale_loads(const std::vector<int64_t>& counts, int64_t total);

}  // namespace moesim
