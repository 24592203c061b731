// Megatron-Core expert-load dumps, format "mcore_ep_load_dump_v1": one .npz per rank written by
// ExpertLoadRecorder (ultra-ep/Megatron-LM, megatron/core/transformer/moe/expert_load_recorder.py, commit
// 98c4f54bb35cd40ca52713d32c64725be5e0b1ce). Members read: dump_version (0-d string), loads int32
// [local MoE layers, forwards, global physical experts] (the tokens this rank routed to each physical expert,
// per forward), layer_numbers int32 [layers], forward_counts int32 [layers] (rows past forward_counts[l] are
// unwritten buffer memory and are skipped), num_global_physical_experts, and when present ep_rank, ep_size,
// num_local_physical_experts (checked for consistency). Output: per layer, the counts summed over its valid
// forwards, exact int64. Errors: InputError "FILE: MEMBER: expected ..., got ...", one line.
// Host only, deterministic. Covered by tests/workload/megatron_loads_test.cpp and tests/fuzz (megatron_npz).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moesim {

constexpr const char* kMegatronDumpVersion = "mcore_ep_load_dump_v1";

struct MegatronLoads {
  std::vector<int> layers;                   // [num_layers] Megatron layer numbers, ascending
  std::vector<int64_t> forward_counts;       // [num_layers] forwards recorded per layer
  std::vector<std::vector<int64_t>> counts;  // [num_layers][physical experts] summed over forwards
  int64_t num_physical_experts = 0;
  int64_t ep_rank = -1, ep_size = -1;        // -1: absent from the dump
  int num_ranks = 1;                         // dumps summed (combine_megatron_loads)
};

MegatronLoads parse_megatron_npz(const std::string& bytes, const std::string& name);
MegatronLoads read_megatron_npz(const std::string& path);

// The loads of an EP group: the element-wise sum of its ranks' dumps (each rank counts only its own tokens).
// The dumps must agree on layers and physical experts; `names` label them in messages.
MegatronLoads combine_megatron_loads(const std::vector<MegatronLoads>& dumps, const std::vector<std::string>& names);

}  // namespace moesim
