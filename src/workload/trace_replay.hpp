// Routing traces recorded from a real model (`workload.source: trace`): JSON Lines, one line per token and
// layer, {"step", "layer", "token", "experts", "weights"} plus optional "logits", "kept", "token_id",
// "phase" (docs/workloads.md "Trace format"). Lines group into batches by (step, layer); a trace with
// logits is re-routed by any strategy, one without is replayed as recorded (replay_routing: the recorded
// decisions under the router's capacity and drop policy). format_trace_lines writes the same format
// (`moesim route|run --dump-routing`). Errors: InputError "FILE:LINE: expected ..., got ...". Host only,
// deterministic.
// Covered by tests/workload/trace_replay_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "router/routing.hpp"

namespace moesim {

// One (step, layer) batch of a trace.
struct TraceBatch {
  int64_t step = 0;
  int layer = 0;
  std::string phase;                 // "prefill", "decode", or "" when the trace does not say
  int64_t num_tokens = 0;
  std::vector<int64_t> token;        // [num_tokens] recorded token index, ascending
  std::vector<int64_t> token_ids;    // [num_tokens] vocabulary ids (the recorded token index when absent)
  std::vector<int64_t> line;         // [num_tokens] 1-based line of each token in the file
  // The recorded decisions, token-major in recorded slot order: token t's assignments are contiguous.
  std::vector<int64_t> offsets;      // [num_tokens + 1] first assignment of each token
  std::vector<int32_t> expert;       // [assignments]
  std::vector<float> weight;         // [assignments]
  std::vector<uint8_t> kept;         // [assignments]
  std::vector<float> logits;         // [num_tokens, num_experts]; empty when the trace has none
};

struct Trace {
  int num_experts = 0;
  bool has_logits = false;
  std::vector<TraceBatch> batches;   // ascending (step, layer)
};

// A parsed trace in flat arrays, one entry per line (row) in file order, and the batch order over them:
// what `run` replays one batch at a time, without a heap object per line or per batch (about 70 bytes a
// line of top-2 without logits). batch(i) builds the i-th TraceBatch of parse_trace's `batches`.
struct FlatTrace {
  int num_experts = 0;
  bool has_logits = false;
  std::vector<int64_t> row_step;       // [rows]
  std::vector<int32_t> row_layer;      // [rows]
  std::vector<int64_t> row_token;      // [rows] recorded token index
  std::vector<int64_t> row_token_id;   // [rows] vocabulary id, -1 when absent
  std::vector<int64_t> row_line;       // [rows] 1-based line in the file
  std::vector<uint8_t> row_phase;      // [rows] 0 none, 1 prefill, 2 decode
  std::vector<int64_t> row_offset;     // [rows + 1] first assignment of each row
  std::vector<int32_t> expert;         // [assignments] in file order
  std::vector<float> weight;           // [assignments]
  std::vector<uint8_t> kept;           // [assignments]
  std::vector<float> logits;           // [rows, num_experts]; empty when the trace has none
  std::vector<int64_t> order;          // [rows] rows by (step, layer, token), file order among equals
  std::vector<int64_t> batch_begin;    // [num_batches + 1] first entry of `order` of each batch
  std::vector<uint8_t> batch_phase;    // [num_batches] the batch's phase code

  size_t num_batches() const { return batch_begin.empty() ? 0 : batch_begin.size() - 1; }
  TraceBatch batch(size_t i) const;
  double bytes() const;                // heap bytes held by the arrays
};

// Parses JSON Lines text; `name` prefixes error messages. Keys: step, layer (>= 0); token (>= 0, unique
// within its step and layer; renumbered 0..n-1 in ascending order); experts (distinct ids in
// [0, num_experts)); weights (one number per expert); optional logits (num_experts numbers, before
// softmax), kept (0/1 per expert, default 1), token_id (vocabulary id), phase ("prefill" | "decode").
// Blank lines are skipped; unknown keys are errors; every line carries logits or none does.
Trace parse_trace(const std::string& text, const std::string& name, int num_experts);
Trace read_trace_file(const std::string& path, int num_experts);
// The same checks and order, into flat arrays; the file is read a line at a time (never whole).
FlatTrace parse_flat_trace(const std::string& text, const std::string& name, int num_experts);
FlatTrace read_flat_trace_file(const std::string& path, int num_experts);

// Whether the file's first line carries "logits" (a trace has them on every line or on none: parse_trace
// checks). False where the file cannot be read or its first line is not JSON: its reader says why.
bool trace_file_has_logits(const std::string& path);

// Whether the trace at `path` can be re-routed by another strategy: moesim's trace lines carrying logits (the
// whole file is read, so a malformed trace is its reader's InputError naming the line); a Megatron-LM router
// trace (megatron_loads.hpp) records none. For `compare --gating` and `sweep --vary router.gating`.
bool trace_can_reroute(const std::string& path, int num_experts);

// The recorded decisions of a batch as a Routing (top_k as given, capacity 0): replayed exactly.
Routing recorded_routing(const TraceBatch& b, int num_experts, int top_k);

// The recorded decisions of a batch replayed under `router`'s capacity (workload.source trace without
// logits). Every token must list exactly top_k experts (else InputError "NAME:LINE: \"experts\": expected
// model.top_k = K expert ids, got N"). With router.capacity_factor > 0, C = expert_capacity(router,
// num_tokens, top_k, num_experts) (min_capacity, capacity_rounding as for routed batches) and apply_capacity
// (router/capacity.hpp) keeps, per expert, the first C assignments by router.drop_policy (position: in
// router.priority order; score: highest recorded weight; random: keyed on `seed`). Assignments recorded as
// dropped stay dropped and take no capacity. router.renormalize_after_drop rescales the kept weights of the
// tokens this replay dropped something from. The Routing's capacity is C (0: dropless, recorded flags only).
// router.capacity_scope sequence needs sequence boundaries a trace does not record: InputError naming it.
Routing replay_routing(const TraceBatch& b, const std::string& name, int num_experts, int top_k,
                       const RouterConfig& router, uint64_t seed);

// Trace lines (each ending in '\n') for a Routing and optional logits [num_tokens, num_experts]:
// each token's assignments in assignment order, kept flags written when any assignment was dropped.
// token_ids: [num_tokens] or null. The inverse of parse_trace up to float formatting (weights and
// logits are written with 9 significant digits, which reads back to the same float).
std::string format_trace_lines(const Routing& r, const float* logits, int64_t step, int layer,
                               const std::string& phase, const int64_t* token_ids);

}  // namespace moesim
