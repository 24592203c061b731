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
#include <istream>
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
  int top_k = 0;                             // router traces: the recorded topk (0: the .npz dumps say none)
};

MegatronLoads parse_megatron_npz(const std::string& bytes, const std::string& name);
MegatronLoads read_megatron_npz(const std::string& path);

// Megatron-LM's router decision traces, format "megatron_router_trace" (NVIDIA/Megatron-LM,
// megatron/core/transformer/moe/router_trace.py, commit 059f0f5c78cddcfa10e34842607d68b745631aeb; written
// with `--moe-routing-trace-path DIR`): one JSON Lines file per rank, router_trace_rank{R}.jsonl, one line per
// (step, block, layer): {"step", "stage", "block": "decoder" | "mtp", "layer", "rank", "num_tokens", "topk",
// "top_indices": [[expert, ...] one list of topk per token]}, with "mtp_idx" on mtp lines and the sidecars'
// offsets (hs_*, logit_*) when captured. Megatron-LM writes no other tokens-per-expert JSONL; this is the one
// its tokens per expert are counted from, exactly. Read: step and layer (>= 0), num_tokens, topk and
// top_indices (num_tokens lists of topk distinct expert ids in [0, num_experts)); other keys are not read.
// Output: per decoder layer (as recorded: the index in the rank's module list), the tokens routed to each
// expert summed over the steps; forward_counts: the layer's lines. Lines of the mtp block (multi-token
// prediction heads, layers of their own that share layer numbers with the decoder's) are left out. Every
// line must give the same topk, and it must be top_k when top_k > 0. Read a line at a time (a trace may be
// far larger than its counts). `workload.source: trace` replays it batch by batch (src/pipeline/run_steps.cpp). Errors: InputError "NAME:LINE: KEY: expected ..., got ...", one line.
constexpr const char* kMegatronRouterTrace = "megatron_router_trace";

// One line of a router trace, checked by the rules above.
struct RouterTraceLine {
  int64_t line = 0;              // 1-based line in the file
  int64_t step = 0;
  int layer = 0;
  bool decoder = true;           // false: an mtp line (its ids are checked for count only, not kept)
  int64_t num_tokens = 0;
  int topk = 0;
  std::vector<int32_t> experts;  // [num_tokens * topk] token-major, decoder lines only
};

// Reads a router trace a line at a time: next() fills the next non-blank line, checked, and returns false at
// the end (InputError "NAME: expected at least one decoder line ..." when the file held none). `in` outlives it.
class RouterTraceReader {
 public:
  RouterTraceReader(std::istream& in, std::string name, int num_experts, int top_k);
  bool next(RouterTraceLine& out);

 private:
  std::istream& in_;
  std::string name_;
  int num_experts_;
  int top_k_;
  int topk_seen_ = 0;
  int64_t lineno_ = 0;
  int64_t decoder_lines_ = 0;
  std::vector<int64_t> seen_;  // the last token (serial) that chose each expert
  int64_t token_serial_ = 0;
};
// Whether a file's first line is a router-trace line: a JSON object with "top_indices".
bool is_megatron_router_trace_line(const std::string& line);
// The same of a file's first non-blank line; false when the file cannot be read (its reader says why).
bool is_megatron_router_trace_file(const std::string& path);
MegatronLoads parse_megatron_router_trace(std::istream& in, const std::string& name, int num_experts, int top_k);
MegatronLoads read_megatron_router_trace(const std::string& path, int num_experts, int top_k);

// The loads of an EP group: the element-wise sum of its ranks' dumps (each rank counts only its own tokens).
// The dumps must agree on layers and physical experts; `names` label them in messages.
MegatronLoads combine_megatron_loads(const std::vector<MegatronLoads>& dumps, const std::vector<std::string>& names);

}  // namespace moesim
